"""`make run`'s pieces: demo_setup then serve_demo (daphne + the demo agent) show the agent's
runs and held calls within 10 s of start, and the demo MCP client's call held at the gateway
(its `workspace` server over stdio) soon after; SIGTERM stops every process."""

import json
import signal
import subprocess
import time

import httpx

from tests.support.live_console import PYTHON, ROOT, free_port, live_env, manage


def poll(url, key, deadline, *, tool_prefix=""):
    """(runs, held calls) as soon as both are non-empty (with a held call whose tool starts
    with `tool_prefix`), or what there is at the deadline."""
    runs, held = [], []
    while time.monotonic() < deadline:
        try:
            page = httpx.get(
                f"{url}/api/v1/runs?limit=50", headers={"Authorization": f"Bearer {key}"}, timeout=2
            ).json()
        except httpx.TransportError:
            time.sleep(0.2)
            continue
        runs = page.get("items", [])
        held = [c for r in runs for c in r["pendingCalls"]]
        if runs and any(c["toolName"].startswith(tool_prefix) for c in held):
            break
        time.sleep(0.2)
    return runs, held


def test_demo_runs_and_held_calls_show_within_10_seconds(tmp_path):
    env = live_env(tmp_path, "sdkdemo")
    manage(env, "migrate", "--verbosity", "0")
    setup = manage(env, "demo_setup")
    assert "admin@demo.example" in setup and "/accounts/login/" in setup
    again = manage(env, "demo_setup")
    assert "demo tenant 'demo' already there" in again  # idempotent
    assert "demo agent key unchanged" in again and "demo MCP key unchanged" in again
    logins = json.loads((tmp_path / "demo-logins.json").read_text())
    key = (tmp_path / "demo-agent.key").read_text().strip()
    assert key.startswith("gvl_")
    assert (tmp_path / "demo-mcp.key").read_text().startswith("gvl_")

    port = free_port(8680)
    serve = subprocess.Popen(
        [PYTHON, "manage.py", "serve_demo", "--no-setup", "--port", str(port)],  # set up above
        cwd=ROOT,
        env={**env, "HOST": "127.0.0.1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started = time.monotonic()
    try:
        runs, held = poll(f"http://127.0.0.1:{port}", key, started + 10)
        elapsed = time.monotonic() - started
        seen = f"{len(runs)} runs and {len(held)} held calls after {elapsed:.1f}s"
        print(seen)
        assert runs and held and elapsed < 10, seen
        # The coding assistant's call, held at the gateway: its server's stdio process starts
        # on the first call, after the console answers.
        runs, held = poll(f"http://127.0.0.1:{port}", key, started + 40, tool_prefix="workspace.")
        mcp = [c for c in held if c["toolName"].startswith("workspace.")]
        assert mcp and mcp[0]["toolName"] == "workspace.write_file", held
        assert {r["principalId"] for r in runs} <= {
            "alice@demo.example",
            "bob@demo.example",
            "carol@demo.example",
            "dev@demo.example",  # the MCP session's run
        }
    finally:
        serve.send_signal(signal.SIGTERM)
        output, _ = serve.communicate(timeout=30)
    assert serve.returncode == 0, output[-2000:]
    assert f"http://127.0.0.1:{port}/accounts/login/" in output
    assert logins["admin@demo.example"] in output  # the login is printed again
    assert "Stopping the demo agent and the server" in output
    assert "Traceback" not in output, output[-3000:]
    with httpx.Client() as client:  # the server is gone with it
        try:
            client.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=1)
            raise AssertionError("the server still answers after SIGTERM")
        except httpx.TransportError:
            pass
