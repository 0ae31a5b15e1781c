"""A live console for the SDK tests: a migrated, provisioned database (SQLite in a temp dir, or
a PostgreSQL database of its own next to DATABASE_URL's) and a daphne subprocess on a port in
8600-8699 that the tests can kill and restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support import workers

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
DAPHNE = str(Path(sys.executable).with_name("daphne"))
PORTS = range(8600, 8700)


def free_port(start: int = 8600) -> int:
    return workers.free_port(range(start, PORTS.stop))


def live_env(var_dir: Path, db_suffix: str, *, database_url: str | None = None) -> dict:
    """The subprocess environment: its own var/ and its own database, no Redis (one process).
    `database_url`: that database (e.g. on a test's own PostgreSQL cluster) instead of a
    fresh one next to DATABASE_URL's."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "REDIS_PREFIX")}
    env.update(
        GAVEL_VAR_DIR=str(var_dir),
        SECRET_KEY=env.get("SECRET_KEY") or "test",
        DEBUG="1",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    url = env.get("DATABASE_URL", "")
    if database_url:
        env["DATABASE_URL"] = database_url
    elif url.startswith(("postgres://", "postgresql://")):
        env["DATABASE_URL"] = _fresh_postgres(url, db_suffix)
    else:
        env.pop("DATABASE_URL", None)
    return env


def _fresh_postgres(url: str, suffix: str) -> str:
    import psycopg

    base, _, name = url.rpartition("/")
    name = name.split("?", 1)[0]
    live = f"{name}_{suffix}{workers.worker_suffix().replace('-', '_')}"  # one per xdist worker
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{live}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{live}"')
    return f"{base}/{live}"


def manage(env: dict, *args: str, timeout: float = 180) -> str:
    done = subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


MANY = """
import io, json
from django.core.management import call_command
outputs = []
for command in json.loads(COMMANDS):
    out = io.StringIO()
    call_command(*command, stdout=out)
    outputs.append(out.getvalue())
print(json.dumps(outputs))
"""


def manage_many(env: dict, *commands: list[str], timeout: float = 180) -> list[str]:
    """Several management commands in one process (Django starts once, not once each):
    the output of each."""
    import json

    done = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", f"COMMANDS = {json.dumps(commands)!r}\n{MANY}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"manage.py commands failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1].strip()


class LiveConsole:
    TENANT = "sdk-live"
    REVIEWER = "reviewer@sdk.example"
    PRINCIPAL = "alice@sdk.example"

    def __init__(self, var_dir: Path, *, db_suffix: str = "sdklive", database_url=None):
        self.var_dir = var_dir
        self.env = live_env(var_dir, db_suffix, database_url=database_url)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = var_dir / "daphne.log"

    def provision(self, *, password: str | None = None) -> None:
        """Migrated, with the tenant, a reviewer (who may sign in with `password`), an
        ingest key and the reviewer's decide key."""
        manage(self.env, "migrate", "--verbosity", "0")
        signs_in = ["--password", password] if password else []
        *_, ingest, decide = manage_many(
            self.env,
            ["create_tenant", self.TENANT],
            ["create_principal", "--tenant", self.TENANT, self.REVIEWER, "--role", "reviewer",
             *signs_in],
            ["create_api_key", "--tenant", self.TENANT, "--name", "runtime"],
            ["create_api_key", "--tenant", self.TENANT, "--name", "reviewer bot",
             "--scope", "decide", "--principal", self.REVIEWER],
        )  # fmt: skip
        self.ingest_key = last_line(ingest)
        self.decide_key = last_line(decide)

    def start(self, timeout: float = 30.0) -> None:
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            [DAPHNE, "-b", "127.0.0.1", "-p", str(self.port), "console.asgi:application"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        headers = {"Authorization": f"Bearer {self.ingest_key}"}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daphne exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(
                    f"{self.url}/api/v1/runs?limit=1", headers=headers, timeout=2
                ).is_success:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(
            f"daphne did not answer within {timeout}s: {self.log.read_text()[-3000:]}"
        )

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def api(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {key or self.ingest_key}"},
            timeout=10,
        )


class ReviewerThread:
    """A reviewer deciding a run's held calls through the API while the runtime waits:
    `script(approval) -> (decision, {"message": ..., "arguments": ...})`."""

    def __init__(self, client, run_id: str, script, *, timeout: float = 60.0):
        import threading

        self.client = client
        self.run_id = run_id
        self.script = script
        self.timeout = timeout
        self.decided: list = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)
        if self.error:
            raise self.error

    def _run(self):
        deadline = time.monotonic() + self.timeout
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                page = self.client.list_approvals(status="pending", run_id=self.run_id)
                for approval in page.items:
                    decision, fields = self.script(approval)
                    self.decided.append(self.client.decide(approval.id, decision, **fields))
                time.sleep(0.1)
        except BaseException as exc:  # reported in __exit__
            self.error = exc
