"""The whole served `/api/v1` schema, tried as a hostile client would: schemathesis (every
check) against a live daphne on a PostgreSQL database of its own, once per key scope
(`ingest`, `decide`, `manage` bound to an admin). Every operation the schema serves is taken
from the schema itself, so new endpoints are fuzzed as soon as they are mounted.

Not part of the default `make test` (marker `fuzz`); `.ci/run` runs it as its own step:
`pytest -m fuzz tests/fuzz`. The seed is printed; `GAVEL_FUZZ_SEED=N` replays a run, and
`GAVEL_FUZZ_EXAMPLES` sets the cases per operation (default 40).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sdk.live import LiveConsole, last_line, manage

pytestmark = [pytest.mark.fuzz, pytest.mark.postgres]

ST = str(Path(sys.executable).with_name("st"))
CONFIG = Path(__file__).with_name("schemathesis.toml")
TENANT = "fuzz"
ADMIN = "fuzz-admin"
SCOPES = ("ingest", "decide", "manage")


def fuzz_seed() -> int:
    raw = os.environ.get("GAVEL_FUZZ_SEED")
    return int(raw) if raw else random.SystemRandom().randrange(2**32)


class FuzzConsole(LiveConsole):
    """A live console with an admin principal and one key per scope, each bound to the
    admin (a `manage` key reaches every management operation) and rate-limited only far
    above what the fuzzer sends."""

    TENANT = TENANT

    def provision(self) -> None:
        manage(self.env, "migrate", "--verbosity", "0")
        manage(self.env, "create_tenant", TENANT)
        manage(self.env, "create_principal", "--tenant", TENANT, ADMIN, "--role", "admin")
        self.keys = {
            scope: last_line(
                manage(
                    self.env,
                    "create_api_key",
                    "--tenant",
                    TENANT,
                    "--name",
                    f"fuzz {scope}",
                    "--scope",
                    scope,
                    *(() if scope == "ingest" else ("--principal", ADMIN)),
                )
            )
            for scope in SCOPES
        }
        self.ingest_key = self.keys["ingest"]


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        pytest.skip("the fuzz run needs PostgreSQL (DATABASE_URL)")
    live = FuzzConsole(tmp_path_factory.mktemp("fuzz"), db_suffix="fuzz")
    live.env.update(
        GAVEL_DEFAULT_RATE_PER_MINUTE="1000000",
        GAVEL_DEFAULT_RATE_BURST="100000",
        GAVEL_WEBHOOK_ALLOW_HTTP="1",
    )
    live.provision()
    live.start()
    yield live
    live.stop()


@pytest.mark.parametrize("scope", SCOPES)
def test_schemathesis_finds_nothing(console, scope, tmp_path):
    """Every check of schemathesis, on every operation of the served schema, with this
    scope's key: no 5xx, no answer outside the schema, no accepted invalid input."""
    seed = fuzz_seed()
    examples = os.environ.get("GAVEL_FUZZ_EXAMPLES", "40")
    command = [
        ST,
        "--config-file",
        str(CONFIG),
        "run",
        f"{console.url}/api/v1/openapi.json",
        "--checks",
        "all",
        "--seed",
        str(seed),
        "--max-examples",
        examples,
        "--workers",
        "2",
        "--phases",
        "examples,coverage,fuzzing",
        "--header",
        f"Authorization: Bearer {console.keys[scope]}",
        "--request-timeout",
        "40",
        "--no-color",
        "--continue-on-failure",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path),
    ]
    print(f"\nschemathesis {scope}: seed {seed} (replay: GAVEL_FUZZ_SEED={seed})", flush=True)
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)
    print(done.stdout[-20000:], done.stderr[-5000:], sep="\n")
    assert done.returncode == 0, (
        f"schemathesis found failures with the {scope} key (seed {seed}):\n{done.stdout[-20000:]}"
    )
