"""Backup and restore as docs/operations.md says (PostgreSQL only): `pg_dump -Fc` of a live
database whose audit chain was pruned, `pg_restore` into a fresh database, then, in another
process serving the restored database: `migrate --check` clean, the audit guards back, and
`GET /api/v1/audit/verify` ok with the same entry count."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from console.audit.log import audit, audit_seal_due, audit_verify
from console.models import AuditEvent, Tenant
from retention.prune import prune_all
from tests.support.factories import make_key
from tests.support.live_console import PYTHON, ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

VERIFY = """
import json, sys, django
django.setup()
from django.test import Client
response = Client().get("/api/v1/audit/verify", headers={"Authorization": "Bearer " + sys.argv[1]})
print(json.dumps({"status": response.status_code, "body": response.json()}))
"""


def _url(name: str) -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"


def _pg_args() -> list[str]:
    db = connection.settings_dict
    return ["-h", db["HOST"] or "127.0.0.1", "-p", str(db["PORT"] or 5432), "-U", db["USER"]]


def _run(args, **kwargs):
    return subprocess.run(args, check=True, capture_output=True, timeout=300, **kwargs)  # noqa: S603


def test_pg_dump_then_restore_into_a_fresh_database_still_verifies(
    on_postgres, tenant_a, admin_a, tmp_path
):
    if not on_postgres:
        pytest.skip("needs PostgreSQL")
    missing = [
        tool for tool in ("pg_dump", "pg_restore", "createdb", "dropdb") if not shutil.which(tool)
    ]
    if missing:
        pytest.skip(f"needs the PostgreSQL client tools: {', '.join(missing)} not found")
    now = timezone.now()
    for n in range(5):
        AuditEvent(
            tenant=tenant_a,
            at=now - timedelta(days=200 - n),
            action="budget.updated",
            object_type="budget",
            object_id=f"old{n}",
        ).save()
    for n in range(4):
        audit(tenant=tenant_a, action="budget.updated", object_type="budget", object_id=f"new{n}")
    secret = make_key(tenant_a, scopes=("manage",), principal=admin_a)
    audit_seal_due()
    Tenant.objects.filter(pk=tenant_a.pk).update(audit_retention_days=30)
    list(prune_all(now=now))
    before = audit_verify(tenant=tenant_a)
    assert (
        before["ok"]
        and AuditEvent.objects.filter(tenant=tenant_a, object_id__startswith="old").count() == 0
    )

    dump = tmp_path / "gavel.dump"
    source = connection.settings_dict["NAME"]
    _run(["pg_dump", *_pg_args(), "-Fc", "-f", str(dump), source])
    restored = f"{source}_restore_{uuid.uuid4().hex[:8]}"
    _run(["createdb", *_pg_args(), restored])
    try:
        _run(["pg_restore", *_pg_args(), "--no-owner", "-d", restored, str(dump)])
        env = {
            **os.environ,
            "DATABASE_URL": _url(restored),
            "DEBUG": "1",
            "ALLOWED_HOSTS": "testserver",
            "DB_POOL": "0",
        }
        _run([PYTHON, "manage.py", "migrate", "--check"], cwd=ROOT, env=env)
        out = _run([PYTHON, "-c", VERIFY, secret], cwd=ROOT, env=env).stdout.decode()
        answer = json.loads(out.strip().splitlines()[-1])
        assert answer["status"] == 200, answer
        assert answer["body"]["ok"] is True, answer
        assert answer["body"]["entries"] == before["entries"]
        triggers = (
            _run(
                [
                    "psql",
                    *_pg_args(),
                    "-At",
                    "-d",
                    restored,
                    "-c",
                    "SELECT tgname FROM pg_trigger WHERE tgname LIKE 'console_audit%' ORDER BY 1",
                ],
            )
            .stdout.decode()
            .split()
        )
        assert "console_auditevent_append_only" in triggers
        assert "console_auditevent_insert_guard" in triggers
    finally:
        subprocess.run(["dropdb", *_pg_args(), "--if-exists", "--force", restored], timeout=120)  # noqa: S603
