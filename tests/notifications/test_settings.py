"""A principal's own notification settings: `GET|PATCH /api/v1/me/notification-settings`
(a manage key acting as its principal, or the signed-in session) and the `/settings/` page,
both through the one service, audited before → after; bad input is a 422 naming the field and
changes nothing."""

import pytest
from django.test import Client

from console.models import AuditEvent
from notifications.models import NotificationSettings
from tests.support.api import ApiClient
from tests.support.factories import make_key

pytestmark = pytest.mark.django_db

URL = "/api/v1/me/notification-settings"
DEFAULTS = {"email": "off", "digestMinutes": 30, "slackUserId": None, "browser": True}


@pytest.fixture
def me_a(client, tenant_a, reviewer_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=reviewer_a))


def test_a_principal_that_never_chose_reads_the_defaults_and_nothing_is_written(me_a):
    response = me_a.get(URL)
    assert response.status_code == 200
    assert response.json() == DEFAULTS
    assert not NotificationSettings.objects.exists()


def test_patch_changes_the_given_fields_and_audits_before_and_after(me_a, reviewer_a):
    response = me_a.patch(URL, {"email": "digest", "digestMinutes": 15, "slackUserId": "U024BE7LH"})
    assert response.status_code == 200
    assert response.json() == {**DEFAULTS, "email": "digest", "digestMinutes": 15,
                               "slackUserId": "U024BE7LH"}  # fmt: skip
    assert me_a.get(URL).json() == response.json()
    row = NotificationSettings.objects.get(principal=reviewer_a)
    assert row.next_digest_at is not None and row.digest_through is not None
    event = AuditEvent.objects.get(action="notification_settings.updated")
    assert event.object_id == "reviewer@a.example" and event.actor_principal == reviewer_a
    assert event.before == DEFAULTS  # the wire form, before → after
    assert event.after == {**DEFAULTS, "email": "digest", "digestMinutes": 15,
                           "slackUserId": "U024BE7LH"}  # fmt: skip
    # The same body again changes nothing and is not audited again.
    assert me_a.patch(URL, {"email": "digest"}).status_code == 200
    assert AuditEvent.objects.filter(action="notification_settings.updated").count() == 1


def test_slack_user_id_null_removes_it(me_a):
    me_a.patch(URL, {"slackUserId": "U1ABC"})
    assert me_a.patch(URL, {"slackUserId": None}).json()["slackUserId"] is None


@pytest.mark.parametrize(
    "body, path",
    [
        ({"email": "sometimes"}, "email"),
        ({"email": None}, "email"),
        ({"digestMinutes": 1}, "digestMinutes"),
        ({"digestMinutes": 10000}, "digestMinutes"),
        ({"digestMinutes": "30"}, "digestMinutes"),
        ({"slackUserId": "bob"}, "slackUserId"),
        ({"browser": "yes"}, "browser"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_a_bad_field_is_a_422_naming_it_and_changes_nothing(me_a, body, path):
    response = me_a.patch(URL, body)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"
    assert [d["path"] for d in response.json()["error"]["details"]] == [path]
    assert not NotificationSettings.objects.exists()
    assert not AuditEvent.objects.filter(action="notification_settings.updated").exists()


def test_a_slack_id_another_principal_holds_is_409_but_another_tenants_is_free(
    client, me_a, tenant_a, tenant_b, lead_a, reviewer_b
):
    lead = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))
    other = ApiClient(Client(), make_key(tenant_b, scopes=("manage",), principal=reviewer_b))
    assert lead.patch(URL, {"slackUserId": "U0LEAD"}).status_code == 200
    NotificationSettings.objects.filter(slack_user_id="U0LEAD").update(slack_user_verified=True)
    response = me_a.patch(URL, {"slackUserId": "U0LEAD", "email": "now"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "slack_user_taken"
    assert me_a.get(URL).json() == DEFAULTS  # nothing of the request was kept
    assert other.patch(URL, {"slackUserId": "U0LEAD"}).status_code == 200  # tenant B's own


def test_no_key_is_401_and_a_key_without_the_manage_scope_403(client, tenant_a, reviewer_a):
    assert ApiClient(client, None).get(URL).status_code == 401
    runtime = ApiClient(client, make_key(tenant_a, scopes=("ingest",)))
    assert runtime.get(URL).status_code == 403  # a key without the manage scope
    decide = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=reviewer_a))
    assert decide.patch(URL, {"email": "now"}).status_code == 403
    assert not NotificationSettings.objects.exists()


def test_each_principal_has_only_its_own(client, me_a, tenant_a, viewer_a):
    viewer = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=viewer_a))
    me_a.patch(URL, {"email": "now"})
    assert viewer.get(URL).json() == DEFAULTS  # a viewer (no capability needed) reads its own


def test_a_signed_in_session_reads_and_patches_with_csrf(tenant_a, reviewer_a):
    browser = Client(enforce_csrf_checks=True)
    browser.login(username="reviewer@a.example", password="reviewer-pass-123")
    assert browser.get(URL).json() == DEFAULTS
    refused = browser.patch(URL, '{"email": "now"}', content_type="application/json")
    assert refused.status_code == 403  # no CSRF token
    page = browser.get("/settings/")
    token = page.cookies["csrftoken"].value
    response = browser.patch(
        URL, '{"email": "now"}', content_type="application/json", headers={"X-CSRFToken": token}
    )
    assert response.status_code == 200 and response.json()["email"] == "now"


# --- the page ---


def _signed_in(username, password):
    browser = Client()
    browser.login(username=username, password=password)
    return browser


def test_the_page_shows_the_settings_and_a_password_link(tenant_a, reviewer_a):
    page = _signed_in("reviewer@a.example", "reviewer-pass-123").get("/settings/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="email" value="off" checked' in html
    assert 'href="/accounts/password_change/"' in html
    assert 'href="/settings/" aria-current="page"' in html  # the navbar's Settings link


def test_the_page_saves_through_the_service_and_audits(tenant_a, viewer_a):
    browser = _signed_in("viewer@a.example", "viewer-pass-123")
    form = {"email": "digest", "digest_minutes": "60", "slack_user_id": " U0VIEW ", "browser": "on"}
    response = browser.post("/settings/", form)
    assert response.status_code == 200 and "were saved" in response.content.decode()
    row = NotificationSettings.objects.get(principal=viewer_a)
    assert (row.email, row.digest_minutes, row.slack_user_id) == ("digest", 60, "U0VIEW")
    assert row.browser is True
    assert AuditEvent.objects.filter(action="notification_settings.updated").count() == 1
    browser.post("/settings/", {"email": "digest", "digest_minutes": "60"})  # box unticked
    assert NotificationSettings.objects.get(principal=viewer_a).browser is False


@pytest.mark.parametrize(
    "form, field_text",
    [
        ({"email": "loud", "digest_minutes": "30"}, "Input should be"),
        ({"email": "digest", "digest_minutes": "often"}, "is not a whole number"),
        ({"email": "digest", "digest_minutes": "2"}, "greater than or equal to 5"),
        ({"email": "now", "digest_minutes": "30", "slack_user_id": "@bob"}, "should match"),
    ],
)
def test_the_page_refuses_bad_input_by_field_and_saves_nothing(
    tenant_a, viewer_a, form, field_text
):
    browser = _signed_in("viewer@a.example", "viewer-pass-123")
    response = browser.post("/settings/", form, headers={"HX-Request": "true"})
    assert response.status_code == 422
    html = response.content.decode()
    assert field_text in html and "Nothing was saved" in html
    assert not NotificationSettings.objects.exists()


def test_the_page_names_a_taken_slack_id_on_its_field(tenant_a, viewer_a, lead_a):
    NotificationSettings.objects.create(
        tenant=tenant_a, principal=lead_a, slack_user_id="U0X", slack_user_verified=True
    )
    browser = _signed_in("viewer@a.example", "viewer-pass-123")
    response = browser.post("/settings/", {"email": "off", "digest_minutes": "30",
                                           "slack_user_id": "U0X"})  # fmt: skip
    assert response.status_code == 422
    assert "another principal" in response.content.decode()
    assert not NotificationSettings.objects.filter(principal=viewer_a).exists()


def test_the_page_needs_a_sign_in(client):
    response = client.get("/settings/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
