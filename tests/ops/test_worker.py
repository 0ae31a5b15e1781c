"""The worker in-process: a failing pass is retried after a back-off (never an exit), the
heartbeat is written and removed, and a stop during a mail lets that mail finish and leaves
the rest due."""

from __future__ import annotations

import pytest
from django.core import mail as django_mail
from django.db import OperationalError

from notifications import mail as mail_module
from notifications.models import EmailState, OutboundEmail
from ops import worker as worker_module
from ops.context import Lifecycle
from ops.models import WorkerHeartbeat

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _not_draining(monkeypatch):
    monkeypatch.setattr(Lifecycle, "draining", False)


def test_a_failing_pass_backs_off_and_the_next_succeeds(monkeypatch):
    worker = worker_module.Worker(interval=0.01)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) <= 3:
            raise OperationalError("terminating connection due to administrator command")
        return {"expired": 0}

    monkeypatch.setattr(worker, "one_pass", flaky)
    assert [worker._iteration() for _ in range(4)] == [1.0, 2.0, 4.0, 0.01]
    assert worker.failures == 0


def test_the_heartbeat_is_written_and_forgotten():
    worker = worker_module.Worker(interval=0.01)
    worker.one_pass()
    beat = WorkerHeartbeat.objects.get(worker=worker.name)
    worker.forget()
    assert not WorkerHeartbeat.objects.filter(pk=beat.pk).exists()


def test_a_stop_during_a_mail_finishes_that_mail_and_leaves_the_rest(tenant_a, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    for i in range(3):
        OutboundEmail.objects.create(tenant=tenant_a, to=f"p{i}@a.example", subject=f"s{i}",
                                     text_body="b")  # fmt: skip
    worker = worker_module.Worker(interval=0.01)
    real_send = mail_module._send

    def send_then_stop(email, connection):
        worker.request_stop()  # SIGTERM arrives while this mail is being sent
        return real_send(email, connection)

    mail_module_send = mail_module._send
    try:
        mail_module._send = send_then_stop
        worker.one_pass()
    finally:
        mail_module._send = mail_module_send
    states = list(OutboundEmail.objects.order_by("id").values_list("state", flat=True))
    assert states == [EmailState.SENT, EmailState.PENDING, EmailState.PENDING]
    assert len(django_mail.outbox) == 1
    assert worker.stop.is_set()


def test_run_stops_on_request_and_removes_its_heartbeat(monkeypatch):
    from console.core import outbox

    monkeypatch.setattr(outbox, "start", lambda **kwargs: None)  # no outbound HTTP thread here
    monkeypatch.setattr(outbox, "stop", lambda *args: None)
    # the test's connection (in its transaction) stays open
    monkeypatch.setattr(worker_module.connections, "close_all", lambda: None)
    monkeypatch.setattr(worker_module, "close_old_connections", lambda: None)
    worker = worker_module.Worker(interval=0.01)
    seen = []
    real = worker.one_pass

    def then_stop():
        counts = real()
        seen.append(WorkerHeartbeat.objects.filter(worker=worker.name).exists())
        worker.request_stop()  # as SIGTERM's handler does
        return counts

    monkeypatch.setattr(worker, "one_pass", then_stop)
    worker.run()  # returns: the stop was honoured after the pass
    assert seen == [True]
    assert not WorkerHeartbeat.objects.filter(worker=worker.name).exists()
