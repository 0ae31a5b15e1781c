"""`manage.py serve_demo`: what `make run` starts after `demo_setup`.

Runs `daphne -b HOST -p PORT console.asgi:application`, the sweep beside it (`manage.py
expire_approvals --loop`: expiry, reminders, escalations, all mail, and the webhook deliveries
the server left due) and the demo agent (`manage.py demo_agent --runs 0`); prints the URL and
the login; stops all three on Ctrl-C or SIGTERM (and stops the others if the server dies).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from console.management.commands.demo_setup import agent_key_file, login_banner, read_logins

STOP_GRACE_SECONDS = 10


def daphne_path() -> str:
    beside = Path(sys.executable).with_name("daphne")
    return str(beside) if beside.exists() else "daphne"


def wait_until_answering(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CommandError(f"the server exited with code {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise CommandError(f"the server did not answer at {url} within {timeout:.0f}s")


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Command(BaseCommand):
    help = "Serve the console with daphne and run the demo agent beside it (make run)."
    requires_system_checks = []  # a process beside the server: its checks are not ours

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-agent", action="store_true", help="serve without the demo agent")
        parser.add_argument("--startup-timeout", type=float, default=30.0)
        parser.add_argument(
            "--access-log", default=None, help="daphne's access log (default: var/access.log)"
        )

    def handle(self, *args, host, port, no_agent, startup_timeout, access_log, **options):
        url = f"http://{host}:{port}"
        access_log = access_log or str(Path(settings.VAR_DIR) / "access.log")
        stopping = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stopping.set())
        server = agent = sweeper = None
        try:
            server = subprocess.Popen(
                [
                    *(daphne_path(), "-b", host, "-p", str(port), "--access-log", access_log),
                    "console.asgi:application",
                ],
                cwd=settings.BASE_DIR,
            )
            # The agent starts beside the server, not after it: its first requests retry until
            # the server answers, so its start-up overlaps the server's.
            if not no_agent:
                agent = self._agent(url)
            wait_until_answering(f"{url}/accounts/login/", server, startup_timeout)
            # The sweep starts once the server answers: its start-up does not compete with
            # the server's and the agent's first runs.
            sweeper = self._manage("expire_approvals", "--loop")
            self._banner(url)
            while not stopping.is_set():
                if server.poll() is not None:
                    raise CommandError(f"the server exited with code {server.returncode}")
                stopping.wait(0.5)
            self.stdout.write("stopping the demo agent and the server")
        finally:
            stop(agent)
            stop(sweeper)
            stop(server)

    def _manage(self, *args: str) -> subprocess.Popen:
        command = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *args]
        return subprocess.Popen(command, cwd=settings.BASE_DIR, stdout=subprocess.DEVNULL)

    def _agent(self, url: str) -> subprocess.Popen | None:
        key_file = agent_key_file()
        if not key_file.exists():
            self.stderr.write("no demo agent key (run `manage.py demo_setup`): serving without it")
            return None
        # The agent reads its key from var/ itself (not on a command line that `ps` shows).
        command = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "demo_agent"]
        return subprocess.Popen([*command, "--runs", "0", "--url", url], cwd=settings.BASE_DIR)

    def _banner(self, url: str) -> None:
        self.stdout.write(f"\nGavel is running at {url}/ (Ctrl-C stops it)")
        logins = read_logins()
        if logins:
            self.stdout.write(login_banner(logins, base_url=url))
        else:
            self.stdout.write("no demo logins yet: run `manage.py demo_setup`")
        self.stdout.flush()
