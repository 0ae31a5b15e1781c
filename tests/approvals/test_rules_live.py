"""Two daphne processes on one PostgreSQL database: a rule created, changed and deactivated
through process A applies to the very next call ingested through process B, whose compiled
rules were cached before (the rules version read with each batch invalidates them)."""

from __future__ import annotations

import os

import httpx
import pytest

from tests.support.daphne import daphne, hold
from tests.support.live_console import last_line, live_env, manage

pytestmark = pytest.mark.postgres

TENANT = "rules-live"
LEAD = "lead@rules.example"


def provision(env: dict) -> tuple[str, str]:
    manage(env, "migrate", "--verbosity", "0")
    manage(env, "create_tenant", TENANT)
    manage(env, "create_principal", "--tenant", TENANT, LEAD, "--role", "lead")
    ingest = last_line(manage(env, "create_api_key", "--tenant", TENANT, "--name", "runtime"))
    rules = last_line(
        manage(env, "create_api_key", "--tenant", TENANT, "--name", "lead",
               "--scope", "manage", "--principal", LEAD)
    )  # fmt: skip
    return ingest, rules


def test_a_rule_made_through_one_process_applies_to_a_call_ingested_through_another(tmp_path):
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")
    env = live_env(tmp_path, "rules2d")
    ingest_key, rules_key = provision(env)
    with (
        daphne(env, tmp_path / "a.log") as url_a,
        daphne(env, tmp_path / "b.log") as url_b,
        httpx.Client(base_url=url_a, headers={"Authorization": f"Bearer {rules_key}"}) as a,
        httpx.Client(base_url=url_b, headers={"Authorization": f"Bearer {ingest_key}"}) as b,
    ):
        other = a.post("/api/v1/rules", json={"name": "files", "effect": "approve",
                                               "toolPattern": "files.*"})  # fmt: skip
        assert other.status_code == 201, other.text
        first = hold(b, "run_0", "email.send")  # B compiles the tenant's rules: none for mail
        assert first["pending"] == ["c1"]

        made = a.post(
            "/api/v1/rules",
            json={"name": "mail", "effect": "approve", "toolPattern": "email.*",
                  "conditions": [{"path": "to", "op": "endsWith", "value": "@acme.com"}]},
        )  # fmt: skip
        assert made.status_code == 201, made.text
        rule_id = made.json()["id"]
        answer = hold(b, "run_1", "email.send")  # the very next batch through B
        assert answer["complete"] is True and answer["pending"] == []
        assert answer["decisions"][0]["decision"] == "approved"
        assert answer["decisions"][0]["decidedByRule"] == rule_id

        patched = a.patch(f"/api/v1/rules/{rule_id}", json={"effect": "deny", "message": "No."})
        assert patched.status_code == 200, patched.text
        answer = hold(b, "run_2", "email.send")
        assert answer["decisions"][0]["decision"] == "denied"
        assert answer["decisions"][0]["message"] == "No."

        assert a.delete(f"/api/v1/rules/{rule_id}").status_code == 204
        assert hold(b, "run_3", "email.send")["pending"] == ["c1"]
        assert a.get(f"/api/v1/rules/{rule_id}").json()["hits"] == 2
