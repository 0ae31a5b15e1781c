"""The whole served `/api/v1` schema, tried as a hostile client would: schemathesis (every
check) against a live daphne on a PostgreSQL database of its own, once per key scope
(`ingest`, `decide`, `manage` bound to an admin). Every operation the schema serves is taken
from the schema itself, so new endpoints are fuzzed as soon as they are mounted.

Not part of the default `make test` (marker `fuzz`); `.ci/run` runs it as its own step:
`pytest -m fuzz tests/fuzz`. The seed is printed; `GAVEL_FUZZ_SEED=N` replays a run, and
`GAVEL_FUZZ_EXAMPLES` sets the fuzzing cases per operation (default: default_examples).
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.live_console import LiveConsole, last_line, manage

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
        self.keys = {scope: self.new_key(scope) for scope in SCOPES}
        self.ingest_key = self.keys["ingest"]

    def new_key(self, scope: str) -> str:
        bound = () if scope == "ingest" else ("--principal", ADMIN)
        args = ("--tenant", TENANT, "--name", f"fuzz {scope}", "--scope", scope, *bound)
        return last_line(manage(self.env, "create_api_key", *args))


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
    # The schema's URL patterns make the fuzzer write webhook URLs and OIDC issuers the server
    # then calls: the server inherits PYTHONPATH with tests/loopback_only (tests/conftest.py),
    # so a generated host neither resolves nor is connected to; only loopback is reached.
    assert "loopback_only" in live.env.get("PYTHONPATH", ""), (
        "the fuzzed server must stay on loopback"
    )
    live.provision()
    live.start()
    yield live
    live.stop()


def reachable_operations(console, scope: str) -> list[tuple[str, str]]:
    """The operation ids of the served schema that this scope's key may call. Each other one
    is probed once: it must refuse with the contract's 403 `missing_scope` body (fuzzing
    more cases of a refusal that comes before any input is read would only spend time)."""
    schema = httpx.get(f"{console.url}/api/v1/openapi.json", timeout=10).json()
    headers = {"Authorization": f"Bearer {console.keys[scope]}"}
    reachable = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            url = console.url + re.sub(r"\{[^}]+\}", "probe", path)
            response = httpx.request(method, url, headers=headers, timeout=40)
            assert response.status_code < 500, (method, path, response.text)
            error = response.json().get("error") if response.status_code >= 400 else None
            if response.status_code == 403 and error["code"] == "missing_scope":
                continue
            reachable.append((operation["operationId"], method.upper()))
    return reachable


def default_examples(operations: int) -> int:
    """Fuzzing cases per operation: 15 (the coverage phase adds its boundary cases, thousands
    for the ingest and manage scopes); a scope with only a few operations (decide) gets
    enough for 1,000 from the fuzzing phase alone. About 5 minutes for all three on 2 cores."""
    return max(15, -(-1000 // operations)) if operations <= 3 else 15


@pytest.mark.parametrize("scope", SCOPES)
def test_schemathesis_finds_nothing(console, scope, tmp_path):
    """Every check of schemathesis, on every operation of the served schema this scope's
    key may call: no 5xx, no answer outside the schema, no accepted invalid input; at least
    1,000 cases per scope.

    DELETE operations come last, each with a fresh key of the scope: one of them may revoke
    the very key it is called with (`DELETE /keys/{keyId}` learns ids from `GET /keys`),
    which would leave every later operation answering 401."""
    seed = fuzz_seed()
    operations = reachable_operations(console, scope)
    assert operations, f"the {scope} key may call no operation"
    examples = os.environ.get("GAVEL_FUZZ_EXAMPLES") or str(default_examples(len(operations)))
    print(
        f"\nschemathesis {scope}: seed {seed} (replay: GAVEL_FUZZ_SEED={seed}), "
        f"{len(operations)} operations, {examples} examples each",
        flush=True,
    )
    passes = [([o for o, method in operations if method != "DELETE"], console.keys[scope])]
    passes += [([o], console.new_key(scope)) for o, method in operations if method == "DELETE"]
    generated = 0
    for number, (ids, key) in enumerate(passes):
        generated += schemathesis_pass(console, ids, key, seed, examples, tmp_path / str(number))
    assert generated >= 1000, f"{generated} cases: fewer than 1,000"


def schemathesis_pass(console, ids, key, seed, examples, report_dir) -> int:
    """One `st run` over these operations; the number of cases it generated."""
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
        "--include-operation-id-regex",
        "^(" + "|".join(re.escape(o) for o in ids) + ")$",
        # One worker: hypothesis describes its filters with ast.parse, which CPython 3.11.7
        # does not do safely from two threads at once ("AST constructor recursion depth
        # mismatch"); the server is one process anyway.
        "--workers",
        "1",
        "--phases",
        "examples,coverage,fuzzing",
        "--header",
        f"Authorization: Bearer {key}",
        "--request-timeout",
        "40",
        "--no-color",
        "--continue-on-failure",
        "--report",
        "junit",
        "--report-dir",
        str(report_dir),
    ]
    report_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, cwd=report_dir, capture_output=True, text=True, check=False)
    print(done.stdout[-20000:], done.stderr[-5000:], sep="\n")
    assert done.returncode == 0, (
        f"schemathesis found failures (seed {seed}, {', '.join(ids)}):\n{done.stdout[-20000:]}"
    )
    found = re.search(r"(\d+) generated", done.stdout)
    return int(found.group(1)) if found else 0
