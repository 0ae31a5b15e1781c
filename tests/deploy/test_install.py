"""deploy/scripts/install.sh, as CI runs it without a container engine: a fresh virtualenv
with exactly deploy/requirements.lock and the console (no dev extras), which then passes
`manage.py check` and refuses to run as root without the override. Slow (a full install):
run by .ci/run (GAVEL_TEST_INSTALL=1), skipped otherwise with that reason."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.live_console import ROOT

LOCK = ROOT / "deploy" / "requirements.lock"


def _pinned() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_the_lock_pins_every_runtime_dependency_and_no_dev_tool():
    pins = _pinned()
    assert all(version for version in pins.values())
    for runtime in ("django", "daphne", "channels-redis", "psycopg", "django-ninja"):
        assert runtime in pins, runtime
    for dev in ("pytest", "playwright", "ruff", "hypothesis", "schemathesis", "gavel-sdk"):
        assert dev not in pins, dev


@pytest.mark.skipif(
    os.environ.get("GAVEL_TEST_INSTALL") != "1",
    reason="a full production install (minutes): set GAVEL_TEST_INSTALL=1 (.ci/run does)",
)
def test_install_sh_makes_a_production_virtualenv(tmp_path: Path):
    venv = tmp_path / "venv"
    env = {**os.environ, "GAVEL_VENV": str(venv), "GAVEL_ALLOW_ROOT": "1"}
    done = subprocess.run(  # noqa: S603
        [str(ROOT / "deploy" / "scripts" / "install.sh")],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    frozen = subprocess.run(  # noqa: S603
        [str(venv / "bin" / "python"), "-m", "pip", "freeze", "--exclude", "gavel"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    installed = {
        line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
        for line in frozen.splitlines()
        if "==" in line
    }
    assert installed == _pinned()  # exactly the lock: nothing more, nothing else
    check = subprocess.run(  # noqa: S603
        [str(venv / "bin" / "python"), "manage.py", "check"],
        cwd=ROOT, env={**env, "DEBUG": "1", "GAVEL_VAR_DIR": str(tmp_path / "var")},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    if os.getuid() == 0:
        refused = subprocess.run(  # noqa: S603
            [str(ROOT / "deploy" / "scripts" / "web.sh")],
            env={**env, "GAVEL_ALLOW_ROOT": "0"}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode == 1 and "refusing to run the console as root" in refused.stderr
