"""Real components a test can stop and start again: a PostgreSQL cluster and a Redis server of
the test's own (never the shared ones), each on a free port of its own range, in a temp dir.

PostgreSQL's initdb refuses to run as root: as root, the cluster is made and run as the
`postgres` user (runuser) in a directory it owns."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.workers import free_port

PG_PORTS = range(55432, 55441)
REDIS_PORTS = range(56379, 56390)


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresCluster:
    """`initdb` + `pg_ctl` on 127.0.0.1:<port>, trust authentication for `postgres`, no fsync
    (a test's data). `stop()` and `start()` as often as the test likes; `close()` removes it."""

    def __init__(self):
        self.bin = postgres_bin()
        if self.bin is None:
            raise RuntimeError("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")
        self.as_root = os.geteuid() == 0
        self.dir = Path(tempfile.mkdtemp(prefix="gavel-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.port = free_port(PG_PORTS)
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8", "--locale=C")  # fmt: skip

    def _run(self, tool: str, *args: str, timeout: float = 60) -> None:
        command = [str(self.bin / tool), *args]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode:
            raise RuntimeError(f"{tool} failed: {done.stdout}\n{done.stderr}")

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options,
                  "-w", "-t", "30", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """`fast`: sessions are ended, the cluster shuts down cleanly; `immediate`: as a crash."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(f"{self.url}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"{self.url}/{name}"

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisServer:
    """redis-server on 127.0.0.1:<port>, no persistence; `stop()` (SIGTERM) and `start()` again
    on the same port, as often as the test likes."""

    def __init__(self):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("redis-server is not installed")
        self.dir = Path(tempfile.mkdtemp(prefix="gavel-redis-"))
        self.port = free_port(REDIS_PORTS)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> None:
        with (self.dir / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603 - the installed redis-server, our arguments
                [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                 "--appendonly", "no", "--dir", str(self.dir)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as s,
            ):
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start: {(self.dir / 'redis.log').read_text()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
