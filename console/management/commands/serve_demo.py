"""`manage.py serve_demo`: what `make run` starts.

First checks that HOST:PORT is free (else one line on stderr and exit 1, before anything else
is printed or started), then runs `demo_setup` (without its banner), `daphne -b HOST -p PORT
console.asgi:application`, the sweep beside it (`manage.py expire_approvals --loop`: expiry,
reminders, escalations, all mail, and the webhook deliveries the server left due), the demo
agent (`manage.py demo_agent --runs 0`) and the demo MCP client (`manage.py demo_mcp_client`:
a coding assistant whose tool calls go through the gateway); prints the URL and the logins once
the server answers; stops them all on Ctrl-C or SIGTERM, quietly (the children run in a session of
their own, so the terminal's Ctrl-C reaches only this process, which stops them), and stops
the others if the server dies.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from console.management.commands.demo_setup import (
    agent_key_file,
    login_banner,
    mcp_key_file,
    read_logins,
)

STOP_GRACE_SECONDS = 10
ASSISTANT_DELAY_SECONDS = 5.0


def daphne_path() -> str:
    beside = Path(sys.executable).with_name("daphne")
    return str(beside) if beside.exists() else "daphne"


class PortBusy(Exception):
    pass


def check_port_free(host: str, port: int) -> None:
    """PortBusy when something already listens on host:port (SO_REUSEADDR as daphne binds, so
    a closing connection's TIME_WAIT is no reason to refuse)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortBusy(str(error.strerror)) from None
            raise


def wait_until_answering(
    url: str, proc: subprocess.Popen, timeout: float, stopping: threading.Event | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (stopping and stopping.is_set()):
        if proc.poll() is not None:
            raise CommandError(f"the server exited with code {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    if stopping and stopping.is_set():
        return
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
        parser.add_argument("--no-setup", action="store_true", help="do not run demo_setup first")

    def handle(self, *args, host, port, no_agent, startup_timeout, access_log, no_setup, **options):
        url = f"http://{host}:{port}"
        logging.getLogger("httpx").setLevel(logging.WARNING)  # not the readiness probe's lines
        stopping = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stopping.set())
        try:
            check_port_free(host, port)
        except PortBusy as busy:
            self.stderr.write(
                f"Port {port} on {host} is already in use ({busy}): stop what holds it, or "
                f"pick another port, e.g. `make run PORT={port + 1}`."
            )
            sys.exit(1)
        if not no_setup:
            call_command("demo_setup", no_banner=True, stdout=self.stdout, stderr=self.stderr)
        access_log = access_log or str(Path(settings.VAR_DIR) / "access.log")
        server = agent = sweeper = assistant = None
        try:
            server = self._spawn(
                [
                    *(daphne_path(), "-b", host, "-p", str(port), "--access-log", access_log),
                    "console.asgi:application",
                ],
            )
            # The agent starts beside the server, not after it: its first requests retry until
            # the server answers, so its start-up overlaps the server's.
            if not no_agent:
                agent = self._agent(url)
            wait_until_answering(f"{url}/accounts/login/", server, startup_timeout, stopping)
            if stopping.is_set():
                return
            # The sweep starts once the server answers: its start-up does not compete with
            # the server's and the agent's first runs.
            sweeper = self._manage("expire_approvals", "--loop")
            self._banner(url)
            # The coding assistant (its calls through the MCP gateway) a few seconds later: its
            # start-up and its server's stdio process do not compete with the agent's first runs.
            assistant_at = time.monotonic() + ASSISTANT_DELAY_SECONDS
            wants_assistant = not no_agent and mcp_key_file().exists()
            while not stopping.is_set():
                if server.poll() is not None:
                    raise CommandError(f"the server exited with code {server.returncode}")
                if wants_assistant and assistant is None and time.monotonic() >= assistant_at:
                    assistant = self._assistant(url)
                stopping.wait(0.5)
            self.stdout.write("\nStopping the demo agent and the server…")
        finally:
            stop(agent)
            stop(assistant)
            stop(sweeper)
            stop(server)

    def _spawn(self, command: list[str], **kwargs) -> subprocess.Popen:
        """A child in a session of its own: the terminal's Ctrl-C reaches only this process,
        which then stops the children with SIGTERM (no KeyboardInterrupt traceback in them)."""
        return subprocess.Popen(command, cwd=settings.BASE_DIR, start_new_session=True, **kwargs)

    def _manage(self, *args: str) -> subprocess.Popen:
        command = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *args]
        return self._spawn(command, stdout=subprocess.DEVNULL)

    def _agent(self, url: str) -> subprocess.Popen | None:
        key_file = agent_key_file()
        if not key_file.exists():
            self.stderr.write("no demo agent key (run `manage.py demo_setup`): serving without it")
            return None
        # The agent reads its key from var/ itself (not on a command line that `ps` shows).
        command = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "demo_agent"]
        return self._spawn([*command, "--runs", "0", "--url", url])

    def _assistant(self, url: str) -> subprocess.Popen:
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        return self._spawn([sys.executable, manage, "demo_mcp_client", "--url", url])

    def _banner(self, url: str) -> None:
        self.stdout.write(f"\nGavel is running at {url}/ (Ctrl-C stops it)")
        self.stdout.write("Each login shows the console as that role sees it:")
        logins = read_logins()
        if logins:
            self.stdout.write(login_banner(logins, base_url=url))
        else:
            self.stdout.write("no demo logins yet: run `manage.py demo_setup`")
        self.stdout.flush()
