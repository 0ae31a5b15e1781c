"""`make run`'s serve_demo as a newcomer meets it, in real processes: a busy port is one line
on stderr and exit 1 before anything is printed or started; the logins (a lead, a reviewer,
an admin and a viewer) are printed once; Ctrl-C stops everything quietly (exit 0, no
traceback). Each test has its own var/ (SQLite) and a port of its own."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _env(var_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(GAVEL_VAR_DIR=str(var_dir), DEBUG="1", PYTHONUNBUFFERED="1")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _manage(*args, env, **kwargs):
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_a_busy_port_is_one_line_and_exit_1_before_any_banner(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = _manage("serve_demo", "--port", str(port), "--no-agent", env=_env(tmp_path))
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert out == ""  # no "Gavel is running", no logins, no setup line
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"Port {port} on 127.0.0.1 is already in use" in lines[0]
    assert f"make run PORT={port + 1}" in lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "demo-logins.json").exists()  # nothing was set up


def test_the_logins_print_once_and_ctrl_c_is_quiet(tmp_path):
    env = _env(tmp_path)
    migrate = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert migrate.returncode == 0, migrate.stderr
    port = _free_port()
    # A session of its own, as a terminal's foreground job: Ctrl-C goes to its whole group.
    proc = _manage("serve_demo", "--port", str(port), "--no-agent", env=env, start_new_session=True)
    seen, deadline = [], time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if "passwords are kept in" in line:
            break
    banner = "".join(seen)
    assert "Gavel is running at" in banner, banner
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
    out, err = proc.communicate(timeout=60)
    everything = banner + out + err
    assert proc.returncode == 0, everything
    assert "Traceback" not in everything and "KeyboardInterrupt" not in everything
    assert everything.count("Sign in at") == 1
    for role, login in (
        ("lead", "lead@demo.example"),
        ("reviewer", "reviewer@demo.example"),
        ("admin", "admin@demo.example"),
        ("viewer", "viewer@demo.example"),
    ):
        assert f"{role}:" in banner and login in banner
    with socket.socket() as again:  # the server is gone: its port is free
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
