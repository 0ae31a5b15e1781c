"""Held call → card with mail of new calls on: a runtime's batch of 500 `approval.requested`
calls, with 50 principals who chose email "now", against a real daphne (PostgreSQL).

Each trial posts a 500-call batch (50 recipients × one mail each, listing up to 50 of its
calls: written and sent after commit, off the request), then at once one held call, and times
that call's POST → its card on a reviewer's inbox socket. The same trials with the 50 choosing
"off" are the same-run baseline. Also reported: the 500-call POST itself, and how long until
the 50 mails of the last batch were written. Target (bench.live (a)): p50 <= 15 ms, p99 <= 50 ms
after the POST returns, and within 1.25x of the baseline.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time

import httpx

from bench import _support as support
from bench.live import PASSWORD, TOOL, admit, ms, pct, sign_in, socket

TRIALS = int(os.environ.get("BENCH_NOTIFY_TRIALS", "30"))
BATCH = 500
RECIPIENTS = 50

# One `manage.py shell` run: 50 deciders with an address, and their choice.
CHOOSE = """
from console.models import Principal, Role, Tenant
from notifications.models import NotificationSettings
tenant = Tenant.objects.get(slug={slug!r})
reviewer = Role.objects.get(tenant=tenant, name="reviewer")
for i in range({n}):
    p, _ = Principal.objects.get_or_create(
        tenant=tenant, external_id=f"mail{{i}}@bench.example",
        defaults={{"email": f"mail{{i}}@bench.example"}})
    p.roles.add(reviewer)
    NotificationSettings.objects.update_or_create(
        principal=p, defaults={{"tenant": tenant, "email": {email!r}}})
"""

COUNT_MAILS = """
from notifications.models import OutboundEmail
print(OutboundEmail.objects.filter(tenant__slug={slug!r}).count())
"""


def choose(slug: str, email: str) -> None:
    support.manage("shell", "-c", CHOOSE.format(slug=slug, n=RECIPIENTS, email=email))


def mails(slug: str) -> int:
    out = support.manage("shell", "-c", COUNT_MAILS.format(slug=slug))
    return int(out.strip().splitlines()[-1])  # (the shell first says what it imported)


def big_batch(seq: int) -> dict:
    calls = [
        {"toolCallId": f"big_{seq}_{i}", "toolName": "email.send", "arguments": {"i": i},
         "reason": "a bulk mailing"}
        for i in range(BATCH)
    ]  # fmt: skip
    return {"events": [{"seq": seq, "type": "approval.requested", "step": seq, "calls": calls}]}


async def trials(base: str, api: httpx.AsyncClient, cookie: str) -> dict:
    ws = await socket(base, "/ws/inbox/", cookie)
    loud, quiet = f"run_big_{secrets.token_hex(4)}", f"run_one_{secrets.token_hex(4)}"
    await admit(api, loud)
    await admit(api, quiet)
    arrived: dict[str, float] = {}
    event = asyncio.Event()

    async def read():
        async for frame in ws:
            for tool in TOOL.findall(frame):
                arrived.setdefault(tool, time.perf_counter())
                event.set()

    reader = asyncio.ensure_future(read())
    big_post, after_return = [], []
    for i in range(1, TRIALS + 1):
        started = time.perf_counter()
        (await api.post(f"/api/v1/runs/{loud}/events", json=big_batch(i))).raise_for_status()
        big_post.append(time.perf_counter() - started)
        tool = f"bench_tool_{i}"
        call = {"toolCallId": f"one_{i}", "toolName": tool, "arguments": {"i": i}}
        body = {"events": [{"seq": i, "type": "approval.requested", "step": i, "calls": [call]}]}
        (await api.post(f"/api/v1/runs/{quiet}/events", json=body)).raise_for_status()
        returned = time.perf_counter()
        while tool not in arrived:
            event.clear()
            await asyncio.wait_for(event.wait(), 30)
        after_return.append(max(0.0, arrived[tool] - returned))
    reader.cancel()
    await ws.close()
    return {"big_post": big_post, "after_return": after_return}


async def measure(base: str, key: str, cookie: str) -> dict:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as api:
        return await trials(base, api, cookie)


def main() -> None:
    support.database_url()
    support.migrate()
    env = support.server_env(SESSION_COOKIE_SECURE="0", CSRF_COOKIE_SECURE="0")
    results = {}
    for label, email in (("off", "off"), ("now", "now")):
        slug, key = support.provision(scopes="ingest")
        reviewer = f"reviewer-{slug}@bench.example"
        support.manage("create_principal", "--tenant", slug, reviewer, "--password", PASSWORD,
                       "--role", "reviewer")  # fmt: skip
        choose(slug, email)
        with support.daphne(env) as base:
            r = asyncio.run(measure(base, key, sign_in(base, reviewer)))
            waited = time.monotonic()
            # Two batches a trial (the 500 calls, the one held call): one mail each per recipient.
            expected = 2 * TRIALS * RECIPIENTS if email == "now" else 0
            while mails(slug) < expected and time.monotonic() - waited < 120:
                time.sleep(0.5)
            r["mails"] = mails(slug)
            r["mails_after_s"] = time.monotonic() - waited
        results[label] = r
    now, off = results["now"], results["off"]
    ratio = pct(now["after_return"], 0.5) / max(pct(off["after_return"], 0.5), 1e-9)
    print(f"{TRIALS} trials; each a {BATCH}-call batch, then one held call")
    print(f"held call POST returned -> card, 50 recipients 'now': {ms(now['after_return'])}")
    print(f"held call POST returned -> card, baseline 'off':      {ms(off['after_return'])}")
    print(f"    ratio p50 now / off: {ratio:.2f}")
    print(f"{BATCH}-call batch POST, 'now': {ms(now['big_post'])}; 'off': {ms(off['big_post'])}")
    waited = now["mails_after_s"]
    print(f"mails written ('now'): {now['mails']} of {2 * TRIALS * RECIPIENTS} "
          f"({waited:.1f} s after the last trial); 'off': {off['mails']}")  # fmt: skip
    print(json.dumps({"p50_ms": pct(now["after_return"], 0.5) * 1000,
                      "p99_ms": pct(now["after_return"], 0.99) * 1000}))  # fmt: skip


if __name__ == "__main__":
    main()
