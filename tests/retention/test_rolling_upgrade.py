"""Rolling upgrades (docs/operations.md, "Upgrades"): `migrate` runs first, while the previous
release still serves, so release N−1's code must work against schema N on the runtime
endpoints. N−1 is the code just before the newest commit that added a migration (or HEAD when
a migration is not committed yet), exported with `git archive` into a temporary directory
(no worktree, nothing in the repository changes) and run from there against this test
database, which has every migration of the code under test applied.

In that process, the old code admits a run, ingests an event batch that holds a call, holds
the decisions long-poll on it from a second thread while the call is decided, and reads the
state. Then the new code reads what the old one wrote. PostgreSQL only (the deployment that
rolls); skipped with the reason when the repository's history is not at hand."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.support.api import ApiClient
from tests.support.factories import make_key
from tests.support.live_console import PYTHON, ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

OLD_CODE = r"""
import json, sys, threading, time, django
django.setup()
import console
from django.test import Client

ingest, decide = sys.argv[1], sys.argv[2]
out = {"module": console.__file__}

def call(method, path, key, body=None):
    client = Client()
    headers = {"Authorization": "Bearer " + key}
    if body is None:
        response = getattr(client, method)(path, headers=headers)
    else:
        response = getattr(client, method)(
            path, json.dumps(body), content_type="application/json", headers=headers
        )
    try:
        payload = response.json()
    except ValueError:
        payload = response.content.decode(errors="replace")[:500]
    return response.status_code, payload

run = {"id": "run_rolling", "agentId": "bot", "agentVersion": 1, "principalId": "rolling@a.example",
       "input": {"ask": "x"}, "startedAt": "2026-12-04T10:00:00Z"}
out["admit"] = call("post", "/api/v1/runs", ingest, run)
events = [
    {"seq": 1, "type": "step.started", "step": 1, "agentId": "bot", "model": "m"},
    {"seq": 2, "type": "approval.requested", "step": 1, "calls": [
        {"toolCallId": "call_1", "toolName": "send_email", "arguments": {"to": "bob"},
         "reason": "needs a human", "rejectionMessage": "declined"}]},
]
out["events"] = call("post", "/api/v1/runs/run_rolling/events", ingest, {"events": events})
out["replay"] = call("post", "/api/v1/runs/run_rolling/events", ingest, {"events": events})

held = {}
def poll():
    started = time.monotonic()
    held["answer"] = call("get", "/api/v1/runs/run_rolling/decisions?wait=20&after=0", ingest)
    held["seconds"] = time.monotonic() - started
poller = threading.Thread(target=poll)
poller.start()
time.sleep(1.5)  # the poll is held
status, listed = call("get", "/api/v1/approvals?status=pending", decide)
items = listed.get("items", []) if status == 200 else []
out["pending"] = (status, [a["toolCallId"] for a in items] if status == 200 else listed)
approval = items[0]["id"] if items else "none"
body = {"decision": "approve"}
out["decision"] = call("post", f"/api/v1/approvals/{approval}/decision", decide, body)
poller.join(30)
out["poll"] = held.get("answer")
out["pollSeconds"] = held.get("seconds")
out["state"] = call("get", "/api/v1/runs/run_rolling/state", ingest)
out["list"] = call("get", "/api/v1/runs?limit=5", ingest)
print("RESULT " + json.dumps(out))
"""


def _git(*args: str) -> str:
    return subprocess.run(  # noqa: S603
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()


def _previous_release() -> str:
    """The commit N−1: before the newest commit that added a migration; HEAD when a migration
    of the code under test is not committed yet. GAVEL_PREVIOUS_RELEASE=<commit> names it."""
    if named := os.environ.get("GAVEL_PREVIOUS_RELEASE"):
        return _git("rev-parse", named)
    pending = _git("status", "--porcelain", "--untracked-files=all", "--", "*/migrations/0*.py")
    if any(line.startswith(("??", "A ")) for line in pending.splitlines()):
        return _git("rev-parse", "HEAD")
    newest = _git("log", "-1", "--format=%H", "--diff-filter=A", "--", "*/migrations/0*.py")
    if not newest:
        pytest.skip("no commit in this history adds a migration")
    return _git("rev-parse", f"{newest}^")


def _export(commit: str, into: Path) -> None:
    archive = subprocess.run(  # noqa: S603
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
        check=True,
        capture_output=True,
        timeout=120,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def _database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def test_the_previous_release_serves_the_runtime_endpoints_on_the_new_schema(
    on_postgres, client, tenant_a, reviewer_a, tmp_path
):
    if not on_postgres:
        pytest.skip("needs PostgreSQL (the deployment that rolls)")
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the repository's git history (a checkout, not an export)")
    try:
        previous = _previous_release()
        _export(previous, tmp_path / "previous")
    except subprocess.CalledProcessError as error:
        pytest.skip(f"the previous release is not in this history (a shallow clone?): {error}")
    ingest = make_key(tenant_a, scopes=("ingest",))
    decide = make_key(tenant_a, scopes=("decide",), principal=reviewer_a)
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "DEBUG": "1",
        "ALLOWED_HOSTS": "testserver",
        "PYTHONPATH": "",  # nothing of the new code's (the loopback guard is re-added below)
    }
    env["PYTHONPATH"] = str(ROOT / "tests" / "loopback_only")
    done = subprocess.run(  # noqa: S603
        [PYTHON, "-c", OLD_CODE, ingest, decide],
        cwd=tmp_path / "previous",
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the previous release failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["module"].startswith(str(tmp_path / "previous")), out["module"]  # the old code
    assert out["admit"][0] == 201, out["admit"]
    assert out["events"][0] == 200 and out["replay"][0] == 200, (out["events"], out["replay"])
    assert out["pending"] == [200, ["call_1"]], out["pending"]
    assert out["decision"][0] == 200, out["decision"]
    status, answer = out["poll"]
    assert status == 200, answer
    assert [d["toolCallId"] for d in answer["decisions"]] == ["call_1"]
    assert out["pollSeconds"] < 20  # woken by the decision, not by the end of `wait`
    assert out["state"][0] == 200 and out["list"][0] == 200, (out["state"], out["list"])

    # ... and the new code reads what the old one wrote
    new = ApiClient(client, ingest)
    state = new.get("/api/v1/runs/run_rolling/state")
    assert state.status_code == 200
    assert [d["toolCallId"] for d in state.json()["decisions"]] == ["call_1"]
