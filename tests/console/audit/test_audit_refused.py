"""`authz.refused`: every 403 of an API call, a page or a socket is audited with its actor,
path, method, reason, address and user agent, at most once per actor and path a minute (the
next entry counts the refusals in between). And a decision's entry carries where it came from."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from approvals.models import Approval
from console.audit.log import audit_refused
from console.models import ApiKey, AuditEvent, AuditRefusalThrottle
from tests.support.api import ApiClient
from tests.support.factories import ApprovalFactory, RunFactory, make_key
from tests.support.sockets import ORIGIN, close_code, session_for


def refusals(**lookup):
    return list(AuditEvent.objects.filter(action="authz.refused", **lookup).order_by("pk"))


@pytest.mark.django_db
def test_an_api_403_is_audited_with_key_principal_path_and_reason(client, tenant_a, lead_a):
    raw = make_key(tenant_a, scopes=("manage",), principal=lead_a)
    key = ApiKey.objects.get(tenant=tenant_a, principal=lead_a)
    api = ApiClient(client, raw)
    response = api.get("/api/v1/audit", headers={"User-Agent": "script/1.0"})
    assert response.status_code == 403
    (entry,) = refusals(tenant=tenant_a)
    assert entry.actor_principal == lead_a and entry.actor_key == key
    assert (entry.object_type, entry.object_id) == ("request", "/api/v1/audit")
    assert entry.data["method"] == "GET" and entry.data["path"] == "/api/v1/audit"
    assert entry.data["code"] == "forbidden" and "'admin' capability" in entry.data["reason"]
    assert entry.data["count"] == 1
    assert (entry.ip, entry.user_agent) == ("127.0.0.1", "script/1.0")


@pytest.mark.django_db
def test_a_missing_scope_is_audited_for_the_key(client, tenant_a):
    api = ApiClient(client, make_key(tenant_a, scopes=("ingest",)))
    assert api.get("/api/v1/audit").status_code == 403
    (entry,) = refusals(tenant=tenant_a)
    assert entry.actor_key is not None and entry.actor_principal is None
    assert entry.data["code"] == "missing_scope"


@pytest.mark.django_db
def test_a_browser_session_without_csrf_is_audited(tenant_a, lead_a):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(lead_a.user)
    response = browser.post("/api/v1/budgets", "{}", content_type="application/json")
    assert response.status_code == 403
    (entry,) = refusals(tenant=tenant_a)
    assert entry.actor_principal == lead_a and entry.data["method"] == "POST"
    assert entry.data["code"] == "csrf_failed"


@pytest.mark.django_db
def test_a_page_403_is_audited(client, tenant_a, viewer_a):
    client.force_login(viewer_a.user)
    response = client.get("/manage/audit/", headers={"User-Agent": "Browser/9"})
    assert response.status_code == 403
    (entry,) = refusals(tenant=tenant_a)
    assert entry.actor_principal == viewer_a and entry.actor_key is None
    assert entry.object_id == "/manage/audit/" and entry.data["method"] == "GET"
    assert (entry.ip, entry.user_agent) == ("127.0.0.1", "Browser/9")


@pytest.mark.django_db
def test_a_thousand_refusals_make_one_entry_and_the_next_counts_them(tenant_a, viewer_a):
    for _ in range(1000):
        audit_refused(actor=viewer_a, path="/manage/", method="GET", reason="no")
    (first,) = refusals(tenant=tenant_a)
    assert first.data["count"] == 1
    throttle = AuditRefusalThrottle.objects.get(tenant=tenant_a, path="/manage/")
    assert throttle.pending == 999
    # Another path is another stream; the same path a minute later writes the next entry.
    audit_refused(actor=viewer_a, path="/budgets/", method="GET", reason="no")
    assert len(refusals(tenant=tenant_a)) == 2
    AuditRefusalThrottle.objects.filter(pk=throttle.pk).update(
        audited_at=timezone.now() - timedelta(seconds=61)
    )
    later = audit_refused(actor=viewer_a, path="/manage/", method="GET", reason="no")
    assert later is not None and later.data["count"] == 1000  # 999 suppressed + this one
    assert AuditRefusalThrottle.objects.get(pk=throttle.pk).pending == 0


@pytest.mark.django_db
def test_an_api_loop_of_refusals_is_throttled_per_actor_and_path(client, tenant_a, lead_a):
    api = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))
    for _ in range(25):
        assert api.get("/api/v1/audit").status_code == 403
    assert len(refusals(tenant=tenant_a)) == 1
    assert AuditRefusalThrottle.objects.get(tenant=tenant_a).pending == 24


@pytest.mark.django_db(transaction=True)
async def test_a_refused_socket_is_audited(tenant_a, viewer_a):
    from console.asgi import application

    headers = [
        (b"origin", ORIGIN),
        (b"host", b"localhost"),
        (b"user-agent", b"SocketClient/3"),
        (b"cookie", await session_for(viewer_a)),
    ]
    socket = WebsocketCommunicator(application, "/ws/budgets/", headers=headers)
    socket.scope["client"] = ("192.0.2.44", 50000)  # what daphne puts in the scope
    await socket.connect(timeout=5)
    assert await close_code(socket) == 4403  # a viewer may not see budgets
    (entry,) = await sync_to_async(refusals)(tenant=tenant_a)
    assert entry.actor_principal_id == viewer_a.pk
    assert entry.object_id == "/ws/budgets/" and entry.data["method"] == "WEBSOCKET"
    assert entry.user_agent == "SocketClient/3" and entry.ip == "192.0.2.44"
    await socket.disconnect()


@pytest.mark.django_db
def test_a_decisions_entry_carries_address_and_user_agent(client, tenant_a, reviewer_a, settings):
    settings.GAVEL_TRUSTED_PROXIES = 1
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_call_id="c1")
    api = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=reviewer_a))
    response = api.post(
        f"/api/v1/approvals/{approval.public_id}/decision",
        {"decision": "approve"},
        headers={"User-Agent": "ReviewBot/1", "X-Forwarded-For": "198.51.100.23"},
    )
    assert response.status_code == 200
    entry = AuditEvent.objects.get(action="approval.decided", object_id=approval.public_id)
    assert (entry.ip, entry.user_agent) == ("198.51.100.23", "ReviewBot/1")
    assert entry.actor_principal == reviewer_a
    assert Approval.objects.get(pk=approval.pk).status == "approved"
