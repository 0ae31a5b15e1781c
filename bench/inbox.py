"""The reviewer's desk (/approvals/) on PostgreSQL.

1. Server time of the desk's first page for a reviewer of a tenant with 10,000 pending calls,
   against the same page for a tenant with 100 (same run, same database, rounds alternating):
   targets <= 50 ms and a ratio <= 1.5. In-process through Django's whole stack (middleware,
   session, access, the selector, the card of the first call, templates), DEBUG off; median of
   ROUNDS.
2. In Chromium (Playwright, against a real daphne): a decision from the keyboard (A) to the
   next call focused with its whole card in the pane, median of 50; target <= 100 ms. Its
   same-run baseline: J (a plain move to the next call). Also recorded: A to the server's
   confirmation (the count updated), the round trip the optimistic move hides.

Data lives in a database of its own (BENCH_INBOX_DB, default gavel_bench_inbox), seeded once in
bulk (tenants `bench-inbox-<n>`) and reused; the keyboard part makes a fresh small tenant each
run (its calls are decided). Knobs (env): BENCH_INBOX_LARGE (10000), BENCH_INBOX_SMALL (100),
BENCH_INBOX_ROUNDS (25), BENCH_INBOX_KEYS (50).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from urllib.parse import urlsplit, urlunsplit

from bench import _support

TARGET_MS, TARGET_RATIO, KEY_TARGET_MS = 50.0, 1.5, 100.0
PASSWORD = "bench-pass-123"


def _db_url() -> str:
    parts = urlsplit(_support.database_url())
    default = "gavel_bench_inbox_quick" if _support.QUICK else "gavel_bench_inbox"
    return urlunsplit(parts._replace(path=f"/{os.environ.get('BENCH_INBOX_DB', default)}"))


def main() -> None:
    url = _db_url()
    _support.ensure_database(url)
    env = _support.server_env(DATABASE_URL=url, ALLOWED_HOSTS="testserver,127.0.0.1,localhost")
    _support.manage("migrate", "--verbosity", "0", env=env)
    done = subprocess.run(
        [_support.PYTHON, "-m", "bench.inbox", "--measure"], cwd=_support.ROOT, env=env, check=False
    )
    if done.returncode:
        sys.exit(done.returncode)


# --- in the child process (Django set up against the bench database) ---


def _tenant(slug: str, pending: int):
    """A tenant with a reviewer and `pending` held calls (10 a run), made in bulk once."""
    from datetime import timedelta

    from django.utils import timezone

    from approvals.models import Approval
    from console.directory.services import tenant_create
    from console.directory.services.principals import principal_create
    from runs.models import Agent, Run

    tenant, _ = tenant_create(slug=slug)  # with the default roles
    reviewer = tenant.principals.filter(external_id=f"reviewer@{slug}").first()
    if reviewer is None:
        reviewer, _ = principal_create(
            tenant=tenant, external_id=f"reviewer@{slug}", password=PASSWORD, roles=["reviewer"]
        )
    have = Approval.objects.filter(tenant=tenant, status="pending").count()
    if have >= pending:
        return tenant, reviewer
    print(f"seeding {pending - have} pending calls into '{slug}' (once; reused)", flush=True)
    agents = [
        Agent.objects.get_or_create(tenant=tenant, external_id=a)[0] for a in ("mailer", "sql")
    ]
    now = timezone.now()
    far = now + timedelta(days=3650)  # pending for as long as the data is reused
    runs = Run.objects.bulk_create(
        Run(
            tenant=tenant,
            external_id=f"run_{have // 10 + i}_{secrets.token_hex(3)}",
            agent=agents[i % 2],
            current_agent_id=agents[i % 2].external_id,
            status="awaiting_approval",
            cost_minor_units=13 * i % 900,
            limits={"costCeilingMinorUnits": 800},
            started_at=now - timedelta(minutes=i % 600),
        )
        for i in range((pending - have + 9) // 10)
    )
    calls = []
    for n in range(pending - have):
        run = runs[n // 10]
        calls.append(
            Approval(
                tenant=tenant,
                run=run,
                step=1,
                position=n % 10,
                tool_call_id=f"call_{n}",
                tool_name=("send_email", "run_sql", "refund_payment")[n % 3],
                arguments={"to": f"user{n}@example.com", "amount": n % 5000},
                reason="needs a human",
                rejection_message="The reviewer declined.",
                requested_at=now - timedelta(seconds=pending - n),
                expires_at=far,
            )
        )
    Approval.objects.bulk_create(calls, batch_size=2000)
    from django.db import connection

    with connection.cursor() as cursor:  # fresh statistics, as autovacuum would gather them
        cursor.execute("ANALYZE approvals_approval, runs_run")
    return tenant, reviewer


def _client(reviewer):
    from django.test import Client

    client = Client()
    client.force_login(reviewer.user)
    return client


def measure() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    django.setup()
    large = _support.size("BENCH_INBOX_LARGE", 10_000, 1_000)
    small = _support.size("BENCH_INBOX_SMALL", 100, 100)
    rounds = _support.size("BENCH_INBOX_ROUNDS", 25, 5)
    keys = _support.size("BENCH_INBOX_KEYS", 50, 10)
    measure_page(large, small, rounds)
    measure_keys(keys)


def measure_page(large: int, small: int, rounds: int) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    clients = {}
    for label, n in (("large", large), ("small", small)):
        _tenant_, reviewer = _tenant(f"bench-inbox-{n}", n)
        clients[label] = _client(reviewer)
    times = {"large": [], "small": []}
    queries = {}
    for label, client in clients.items():
        assert client.get("/approvals/").status_code == 200  # warm
        with CaptureQueriesContext(connection) as ctx:
            client.get("/approvals/")
        queries[label] = len(ctx.captured_queries)
    load_before = os.getloadavg()[0]
    for _ in range(rounds):
        for label, client in clients.items():  # the two tenants alternate round by round
            started = time.perf_counter()
            response = client.get("/approvals/")
            times[label].append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
    big, base = _support.median(times["large"]), _support.median(times["small"])
    ratio = big / base
    met = big <= TARGET_MS and ratio <= TARGET_RATIO
    _support.record(
        "inbox",
        f"/approvals/ first page, {large:,} pending calls, in-process",
        f"{big:.1f} ms ({queries['large']} queries)",
        baseline=f"{small:,} pending: {base:.1f} ms ({queries['small']} queries)",
        ratio=ratio,
        target=f"≤ {TARGET_MS:.0f} ms, ratio ≤ {TARGET_RATIO}",
        met=met,
    )
    print(f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


# The page's own clock: from the keydown (a window capture listener, before the desk's) to the
# first moment the next call is focused and its card is the pane's.
ARM = """(key) => {
  const before = document.activeElement.dataset.approvalId;
  window.__elapsed = null;
  window.__done = new Promise((resolve) => {
    const check = () => {
      const row = document.activeElement;
      const card = document.querySelector('#desk-pane article.approval-card');
      if (window.__t0 && row && row.classList.contains('desk-row')
          && row.dataset.approvalId !== before && card
          && card.dataset.approvalId === row.dataset.approvalId) {
        observer.disconnect();
        document.removeEventListener('focusin', check, true);
        resolve(performance.now() - window.__t0);
      }
    };
    const observer = new MutationObserver(check);
    observer.observe(document.getElementById('desk-pane'), {childList: true, subtree: true});
    document.addEventListener('focusin', check, true);
  });
  window.__t0 = null;
  if (!window.__armed) {
    window.addEventListener('keydown', () => { window.__t0 = performance.now(); }, true);
    window.__armed = true;
  }
}"""


def measure_keys(n: int) -> None:
    import shutil

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(chromium):
        print(f"no chromium at {chromium}: the keyboard figure is not measured")
        return
    slug = f"bench-inbox-keys-{secrets.token_hex(3)}"
    _tenant(slug, 2 * n + 12)  # enough for the J baseline and the decisions, with rows to spare
    # Plain HTTP on loopback: the browser keeps the session only without the Secure flag.
    env = {**os.environ, "SESSION_COOKIE_SECURE": "0", "CSRF_COOKIE_SECURE": "0"}
    with _support.daphne(env) as base:
        elapsed, confirmed, moves = _drive(chromium, base, slug, n)
    med, conf, move = (_support.median(x) for x in (elapsed, confirmed, moves))
    _support.record(
        "inbox",
        f"keyboard decision (A) → next call focused with its card, Chromium, median of {n}",
        f"{med:.1f} ms",
        baseline=f"J (move to the next call): {move:.1f} ms",
        ratio=med / move if move else None,
        target=f"≤ {KEY_TARGET_MS:.0f} ms",
        met=med <= KEY_TARGET_MS,
    )
    _support.record(
        "inbox",
        f"keyboard decision (A) → the server's answer to its POST, median of {n}",
        f"{conf:.1f} ms",
        baseline=f"next call focused: {med:.1f} ms",
        ratio=conf / med if med else None,
    )


def _drive(chromium: str, base: str, slug: str, n: int):
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    elapsed, confirmed, moves = [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=args, headless=True)
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        page.goto(f"{base}/accounts/login/?next=/approvals/")
        page.get_by_label("Email", exact=True).fill(f"reviewer@{slug}")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in", exact=True).click()
        page.wait_for_url(f"{base}/approvals/")
        page.wait_for_function("() => document.activeElement.classList.contains('desk-row')")
        page.wait_for_timeout(500)  # the first prefetches land
        for _ in range(n):  # the baseline: J, a plain move
            page.evaluate(ARM, "j")
            page.keyboard.press("j")
            moves.append(page.evaluate("() => window.__done"))
            page.wait_for_timeout(30)
        decisions = "/api/v1/approvals/decisions"
        for _ in range(n):
            page.evaluate(ARM, "a")
            with page.expect_response(lambda r: r.url.endswith(decisions)) as answer:
                page.keyboard.press("a")
                elapsed.append(page.evaluate("() => window.__done"))
            assert answer.value.ok and answer.value.json()["decided"] == 1, answer.value.text()
            confirmed.append(page.evaluate("() => performance.now() - window.__t0"))
            page.wait_for_timeout(30)  # a person's pace, roughly: the next prefetch lands
        browser.close()
    return elapsed, confirmed, moves


if __name__ == "__main__":
    if "--measure" in sys.argv:
        measure()
    else:
        main()
