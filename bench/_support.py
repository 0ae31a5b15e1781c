"""What every benchmark needs: PostgreSQL from DATABASE_URL, a migrated schema, a tenant and a
key made with the provisioning commands, and a real daphne on a free port."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
DAPHNE = str(Path(PYTHON).with_name("daphne"))


def database_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("benchmarks need PostgreSQL: set DATABASE_URL=postgres://...")
    ensure_database(url)
    return url


def analyze() -> float | None:
    """ANALYZE the shared benchmark database (DATABASE_URL), when it exists: a benchmark that
    wrote hundreds of thousands of rows leaves PostgreSQL's statistics stale until autovacuum
    comes round, and the next one would measure plans a live database does not run (after
    `bench ingest`, a count of one tenant's pending calls read a bitmap of every call: 22 ms
    instead of 1). Seconds it took, or None without a database to analyze."""
    import psycopg

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return None
    started = time.perf_counter()
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute("ANALYZE")
    except psycopg.OperationalError:  # not created yet: nothing written, nothing stale
        return None
    return time.perf_counter() - started


def ensure_database(url: str) -> None:
    """Create the database `url` names when it does not exist yet (benchmarks keep their data
    in databases of their own)."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def server_env(**extra) -> dict:
    """Production-like settings: DEBUG off (no query log), a random secret key."""
    env = dict(os.environ)
    env.update(
        DEBUG="0",
        SECRET_KEY=env.get("BENCH_SECRET_KEY") or secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        LOG_LEVEL="WARNING",
        # The bench drives one key far past the default rate: give it room.
        GAVEL_DEFAULT_RATE_PER_MINUTE=env.get("GAVEL_DEFAULT_RATE_PER_MINUTE", "10000000"),
        GAVEL_DEFAULT_RATE_BURST=env.get("GAVEL_DEFAULT_RATE_BURST", "100000"),
        # ...and its thousands of sockets of one signed-in reviewer, and its held polls.
        GAVEL_WS_MAX_PER_PRINCIPAL=env.get("GAVEL_WS_MAX_PER_PRINCIPAL", "100000"),
        GAVEL_WS_MAX_PER_SESSION=env.get("GAVEL_WS_MAX_PER_SESSION", "100000"),
        GAVEL_LONGPOLL_MAX_PER_TENANT=env.get("GAVEL_LONGPOLL_MAX_PER_TENANT", "100000"),
    )
    env.update(extra)
    return env


def manage(*args: str, env: dict | None = None) -> str:
    done = subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT,
        env=env or server_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr or done.stdout}")
    return done.stdout


def manage_batch(*commands: tuple[str, ...], env: dict | None = None) -> list[str]:
    """Several management commands in one Django process (each `manage.py` start costs ~3 s
    here); returns each one's output. Arguments are given as on the command line."""
    import json

    script = (
        "import io, json\n"
        "from django.core.management import call_command\n"
        "outs = []\n"
        f"for args in json.loads({json.dumps(json.dumps(commands))}):\n"
        "    buf = io.StringIO()\n"
        "    call_command(*args, stdout=buf)\n"
        "    outs.append(buf.getvalue())\n"
        "print('BENCH-OUTPUTS' + json.dumps(outs))\n"
    )
    out = manage("shell", "-c", script, env=env)
    return json.loads(out.rsplit("BENCH-OUTPUTS", 1)[1])


def migrate() -> None:
    manage("migrate", "--verbosity", "0")


def provision(
    *, scopes: str = "ingest", tenant: str | None = None, then: tuple = ()
) -> tuple[str, str]:
    """A fresh tenant and an API key for it: (slug, raw key). `then`: more management commands
    to run in the same process, each a tuple of arguments where "{slug}" is the tenant."""
    slug = tenant or f"bench-{secrets.token_hex(4)}"
    more = tuple(tuple(a.replace("{slug}", slug) for a in command) for command in then)
    outs = manage_batch(
        ("create_tenant", slug, "--name", f"Benchmark {slug}"),
        ("create_api_key", "--tenant", slug, "--name", "bench", "--scope", scopes),
        *more,
    )
    return slug, outs[1].strip().splitlines()[-1].strip()


def provision_principal(
    principal: str, *, role: str, password: str | None = None, key_scope: str | None = None
) -> tuple[str, str, str | None]:
    """A fresh tenant with an ingest key and one principal (`{slug}` in its id is the tenant),
    optionally with a password and a key of `key_scope` bound to it: (slug, ingest key, the
    principal's key or None)."""
    slug = f"bench-{secrets.token_hex(4)}"
    principal = principal.replace("{slug}", slug)
    create = ["create_principal", "--tenant", slug, principal, "--role", role]
    if password:
        create += ["--password", password]
    commands = [
        ("create_tenant", slug, "--name", f"Benchmark {slug}"),
        ("create_api_key", "--tenant", slug, "--name", "bench", "--scope", "ingest"),
        tuple(create),
    ]
    if key_scope:
        commands.append(("create_api_key", "--tenant", slug, "--name", f"bench {key_scope}",
                         "--scope", key_scope, "--principal", principal))  # fmt: skip
    outs = manage_batch(*commands)
    ingest, *bound = (outs[i].strip().splitlines()[-1].strip() for i in (1, 3) if i < len(outs))
    return slug, ingest, bound[0] if bound else None


def free_port() -> int:
    """A free TCP port in BENCH_PORTS (default 8100-8199)."""
    low, high = (int(p) for p in os.environ.get("BENCH_PORTS", "8100-8199").split("-"))
    for port in range(low, high + 1):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    sys.exit(f"no free port in {low}-{high}")


PROCS: dict[str, subprocess.Popen] = {}  # base URL -> the daphne serving it


@contextlib.contextmanager
def daphne(env: dict | None = None, app: str = "console.asgi:application"):
    """A real daphne serving `app` (console.asgi) on a free port; yields its base URL."""
    port = free_port()
    # Its log goes to a file, never to a pipe nobody reads while it serves: a full pipe (64 KB,
    # ~350 "Not Found" warnings) blocked the server's next log line, and the server with it.
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed when the server stops
    proc = subprocess.Popen(
        [DAPHNE, "-b", "127.0.0.1", "-p", str(port), app],
        cwd=ROOT,
        env=env or server_env(),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    PROCS[base] = proc  # a benchmark may read the server's CPU time (bench/live.py)
    try:
        _wait_ready(base, proc, log)
        yield base
    finally:
        PROCS.pop(base, None)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_ready(base: str, proc: subprocess.Popen, log) -> None:
    wait = float(os.environ.get("BENCH_START_SECONDS", "30"))  # a loaded machine needs more
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"daphne exited: {log.read().decode()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/api/v1/openapi.json", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"daphne did not answer within {wait:.0f} s (BENCH_START_SECONDS)")


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """CPU time (user + system) a process has used; with `children`, also that of its
    children that have exited (PostgreSQL's backends, once their connections close)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float | None:
    """CPU time of the PostgreSQL server on this machine (its postmaster, every live backend
    and every exited one), or None when it cannot be read (another host, another user)."""
    total, postmaster = 0.0, False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as comm:
                if not comm.read().startswith("postgres"):
                    continue
            with open(f"/proc/{entry}/stat") as stat:
                parent = stat.read().rsplit(")", 1)[1].split()[1]
            is_postmaster = parent == "1" or _comm(parent) != "postgres"
            total += cpu_seconds(int(entry), children=is_postmaster)
            postmaster |= is_postmaster
        except (OSError, ValueError, IndexError):
            continue
    return total if postmaster else None


def _comm(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


# --- sizes (full or --quick) and the figures each benchmark reports ---

QUICK = os.environ.get("BENCH_QUICK") == "1"


def size(env: str, full, quick):
    """A benchmark's knob: the environment's value when set, else the full run's default, or
    the quick one under `python -m bench --quick` (BENCH_QUICK=1: small enough for CI to prove
    the benchmark still works; its figures are not the ones the targets are about)."""
    value = os.environ.get(env)
    default = quick if QUICK else full
    return default if value is None else type(default)(value)


def record(
    bench: str,
    figure: str,
    value: str,
    *,
    baseline: str = "—",
    ratio: float | None = None,
    target: str = "—",
    met: bool | None = None,
) -> None:
    """One row of the summary `python -m bench` prints and writes into docs/benchmarks.md:
    a figure, its same-run baseline, their ratio, the target and whether it was met. Rows go
    to the file named by BENCH_RESULTS (JSON lines; a benchmark's child process inherits it),
    and are printed."""
    row = {"bench": bench, "figure": figure, "value": value, "baseline": baseline,
           "ratio": ratio, "target": target, "met": met}  # fmt: skip
    print(f"  [figure] {bench}: {figure} = {value} (baseline {baseline}"
          + (f", ratio {ratio:.2f}" if ratio is not None else "")
          + (f"; target {target}: {'met' if met else 'MISSED'}" if met is not None else "")
          + ")", flush=True)  # fmt: skip
    path = os.environ.get("BENCH_RESULTS")
    if path:
        import json

        with open(path, "a") as out:
            out.write(json.dumps(row) + "\n")
