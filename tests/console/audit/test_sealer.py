"""Sealing a moment after the commit (console.audit.log's Sealer, GAVEL_AUDIT_SEAL_DELAY_MS):
the writing request answers without waiting for its seal, a tenant's commits within the delay
are sealed together into one chain, and a stopping server seals what it has left. The test
process otherwise seals right after each commit (tests/conftest.py); the servers the live
tests start use the delay."""

from __future__ import annotations

import time

import pytest
from django.db import connection, transaction

from console.audit import log as audit_log
from console.audit.log import audit_seal_due, audit_seals_flush, audit_verify
from console.models import AuditEvent
from tests.console.audit.test_audit_log import entry

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _entry(tenant, n: int):
    with transaction.atomic():  # its own commit
        return entry(tenant, n)


def _unsealed(entries) -> int:
    return AuditEvent.objects.filter(pk__in=[e.pk for e in entries], hash__isnull=True).count()


def _until_sealed(entries, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while _unsealed(entries):
        assert time.monotonic() < deadline, "not sealed in time"
        time.sleep(0.02)


def test_entries_are_sealed_a_moment_after_their_commits_together(tenant_a, settings, monkeypatch):
    settings.GAVEL_AUDIT_SEAL_DELAY_MS = 500
    audit_seal_due()
    seals = []
    real = audit_log.audit_seal
    monkeypatch.setattr(
        audit_log, "audit_seal", lambda **kw: seals.append(kw["tenant_id"]) or real(**kw)
    )
    first, second = _entry(tenant_a, 1), _entry(tenant_a, 2)
    assert _unsealed([first, second]) == 2  # committed; the writer did not wait for a seal
    _until_sealed([first, second])
    assert seals == [tenant_a.pk]  # the two commits within the delay: one seal
    first.refresh_from_db()
    second.refresh_from_db()
    assert second.chain_seq == first.chain_seq + 1 and second.prev_hash == first.hash
    assert audit_verify(tenant=tenant_a)["ok"] is True


def test_a_stopping_server_seals_what_it_has_left_at_once(tenant_a, tenant_b, settings):
    settings.GAVEL_AUDIT_SEAL_DELAY_MS = 600_000  # never by the timer in this test
    made = [_entry(tenant_a, 1), _entry(tenant_b, 2), _entry(tenant_a, 3)]
    assert _unsealed(made) == 3
    assert audit_seals_flush() == 2  # its two tenants
    assert _unsealed(made) == 0
    assert audit_seals_flush() == 0  # nothing left


def test_a_failing_seal_is_logged_and_the_sealer_goes_on(tenant_a, settings, monkeypatch, caplog):
    settings.GAVEL_AUDIT_SEAL_DELAY_MS = 50
    real = audit_log.audit_seal
    calls = []

    def flaky(**kw):
        calls.append(kw)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(**kw)

    monkeypatch.setattr(audit_log, "audit_seal", flaky)
    lost = _entry(tenant_a, 1)
    deadline = time.monotonic() + 10
    while not calls:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    later = _entry(tenant_a, 2)  # the next seal of the tenant seals the one left behind too
    _until_sealed([lost, later])
    assert any("sealing tenant" in r.getMessage() for r in caplog.records)


def test_with_no_delay_the_commit_seals_at_once(tenant_a, settings):
    assert connection.vendor == "postgresql"
    settings.GAVEL_AUDIT_SEAL_DELAY_MS = 0
    made = _entry(tenant_a, 1)
    assert _unsealed([made]) == 0
