"""prometheus-client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR): two processes count,
and either one's /metrics registry serves the sum, with the database's gauges beside it."""

from __future__ import annotations

import os
import subprocess

from tests.support.live_console import PYTHON, ROOT

COUNT = """
from ops import instruments
instruments.HTTP_REQUESTS.labels("GET", "/healthz", "2xx").inc({n})
instruments.WEBSOCKETS.inc({n})
"""
SCRAPE = """
from prometheus_client import generate_latest
from ops import collect, instruments
instruments.WEBSOCKETS.inc(0)
print(generate_latest(collect.registry()).decode())
"""


def _shell(env, code: str) -> str:
    done = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", code],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_sum_of_the_hosts_processes(tmp_path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DEBUG": "1"}
    env["GAVEL_VAR_DIR"] = str(tmp_path / "var")
    env.pop("DATABASE_URL", None)  # SQLite of its own: the gauges' tables migrated below
    subprocess.run([PYTHON, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env,
                   check=True, timeout=300)  # fmt: skip
    _shell(env, COUNT.format(n=2))
    _shell(env, COUNT.format(n=3))
    text = _shell(env, SCRAPE)
    assert 'gavel_http_requests_total{method="GET",route="/healthz",status="2xx"} 5.0' in text
    assert "gavel_approvals_pending 0.0" in text
    # the sockets of processes that have exited are not counted (livesum)
    assert "gavel_websocket_connections 0.0" in text
