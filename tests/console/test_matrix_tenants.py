"""Issue 14, the cross-tenant matrix: tenant B's admin (a key with every scope, and a signed-in
browser) asks for tenant A's objects on every API operation of the served schema, every page
of the URL resolver and every socket route (tests/support/matrix.py enumerates them): each one
is a 404 (a refused socket), and no answer names anything of A or counts anything of A. Lists
are checked the other way: what B reads holds nothing of A."""

import json
import re

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from approvals.models import ApprovalStatus
from runs.models import Run
from tests.support import matrix
from tests.support.factories import make_key
from tests.support.sockets import open_socket

FAST_HASHER = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db, settings):
    settings.PASSWORD_HASHERS = FAST_HASHER
    settings.GAVEL_WEBHOOK_ALLOW_HTTP = True
    return matrix.build_world()


def _body(response) -> str:
    """The answer's text, streamed (the tenant export) or not."""
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode(errors="replace")
    return response.content.decode(errors="replace")


def call(client, method, url, *, key=None, body=None, raw=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    send = getattr(client, method.lower())
    if raw is None and body is None:
        return send(url, headers=headers)
    data = raw if raw is not None else json.dumps(body)
    return send(url, data, content_type="application/json", headers=headers)


def browser_of(principal) -> Client:
    browser = Client()
    browser.force_login(principal.user)
    return browser


def _not_found_problems(world, label, response, used) -> list[str]:
    """Why this answer is not a bare 404 of the requested id (empty: it is)."""
    text = _body(response)
    problems = []
    if response.status_code != 404:
        problems.append(f"{label}: {response.status_code}, not 404: {text[:200]}")
    leaked = world.leaks(text, allowed=used)
    if leaked:
        problems.append(f"{label}: the answer names A's {leaked}")
    rest = text
    for value in used:
        rest = rest.replace(value, "")
    if re.search(r"\d", rest):
        problems.append(f"{label}: the answer holds a number (a count of A's?): {text[:200]}")
    return problems


def _a_is_untouched(world):
    objects = world.objects
    approval = objects["approval"]
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    objects["rule"].refresh_from_db()
    assert objects["rule"].active
    objects["budget"].refresh_from_db()
    assert objects["budget"].archived_at is None
    objects["notification"].refresh_from_db()
    assert objects["notification"].read_at is None
    objects["webhook"].refresh_from_db()
    assert objects["webhook"].is_active
    objects["key"].refresh_from_db()
    assert objects["key"].revoked_at is None
    objects["run"].refresh_from_db()
    assert objects["run"].last_seq == 0 and objects["run"].status == "running"


def test_the_walk_finds_every_kind_of_endpoint_it_must_cover():
    operations = {str(op) for op in matrix.api_operations()}
    assert {
        "POST /api/v1/runs",
        "GET /api/v1/runs/{runId}",
        "POST /api/v1/approvals/{approvalId}/decision",
        "PATCH /api/v1/budgets/{budgetId}",
        "DELETE /api/v1/rules/{ruleId}",
        "POST /api/v1/notifications/{notificationId}/read",
    } <= operations
    routes = {page.route for page in matrix.pages()}
    assert {"runs/<run_id>/", "approvals/<approval_id>/decision/", "manage/"} <= routes
    assert not any(route.startswith(("api/", "accounts/", "django-admin/")) for route in routes)
    assert {s.route for s in matrix.sockets()} >= {"ws/runs/<run_id>/", "ws/budgets/<budget_id>/"}


def test_the_minimal_bodies_validate_so_a_404_is_not_a_422_in_disguise(world, client):
    """Tenant A's own admin sends each operation its minimal body on A's objects: none is a
    422 (409s are fine: A's objects are not in the state those bodies assume)."""
    key = make_key(world.tenant_a, scopes=("ingest", "decide", "manage"), principal=world.admin_a)
    failures = []
    for op in matrix.api_operations():
        if op.body_schema is None:
            continue
        url, used = world.fill(op.path, op.params, python=False)
        response = call(client, op.method, url, key=key, body=matrix.body_for(op, used))
        if response.status_code == 422:
            failures.append(f"{op}: {response.content[:300]}")
    assert not failures, "bodies to fix in matrix.BODY_EXTRAS:\n" + "\n".join(failures)


def test_a_path_parameter_without_a_tenant_a_object_fails_saying_what_to_add(world):
    with pytest.raises(AssertionError, match="add a tenant-A object for path parameter gizmoId"):
        world.fill("/api/v1/gizmos/{gizmoId}", ("gizmoId",), python=False)


def test_the_leak_check_catches_a_name_an_id_or_a_count_of_a(world):
    """The checks below would see a leak: a status other than 404, a name or another id of A,
    a number (a count) beside the requested id."""
    from django.http import HttpResponse

    run = world.ids["run"]

    def problems(status, text):
        return _not_found_problems(world, "x", HttpResponse(text, status=status), [run])

    assert (
        problems(404, f'{{"error": {{"code": "run_not_found", "message": "no run {run}"}}}}') == []
    )
    assert problems(403, "forbidden")
    assert problems(404, f"no run {run} of Acme Secretcorp")
    assert problems(404, f"no run {run}; see {world.ids['approval']}")
    assert problems(404, f"no run {run} (your tenant has 3 runs)")


def test_every_api_operation_on_a_tenant_a_id_is_a_bare_404_for_tenant_bs_key(world, client):
    """With a valid-looking body and with one that is not JSON at all (404 comes before 422),
    and with B's browser session where the operation takes one; A is left as it was."""
    failures, walked = [], 0
    session = browser_of(world.admin_b)
    for op in matrix.api_operations():
        if not op.params or op.method == "PUT":  # PUT: below
            continue
        walked += 1
        url, used = world.fill(op.path, op.params, python=False)
        body = matrix.body_for(op, used)
        response = call(client, op.method, url, key=world.key_b, body=body)
        failures += _not_found_problems(world, f"{op} (B's key)", response, used)
        if body is not None:
            response = call(client, op.method, url, key=world.key_b, raw="{not json")
            failures += _not_found_problems(world, f"{op} (B's key, bad body)", response, used)
        if op.accepts_session:
            response = call(session, op.method, url, body=body)
            failures += _not_found_problems(world, f"{op} (B's session)", response, used)
    assert walked >= 14
    assert not failures, "\n".join(failures)
    _a_is_untouched(world)


def test_a_put_on_a_tenant_a_run_id_makes_tenant_bs_own_run_and_leaves_as_alone(world, client):
    """PUT .../state may create the run (run ids are unique per tenant): B gets a run of its
    own with that id, its answer names nothing else of A, and A's run is unchanged."""
    failures = []
    for op in matrix.api_operations():
        if op.method != "PUT" or not op.params:
            continue
        url, used = world.fill(op.path, op.params, python=False)
        body = matrix.body_for(op, used)
        response = call(client, op.method, url, key=world.key_b, body=body)
        text = response.content.decode()
        if response.status_code not in (200, 201):
            failures.append(f"{op}: {response.status_code}, not B's own new run: {text[:200]}")
        if world.leaks(text, allowed=used):
            failures.append(f"{op}: the answer names A's {world.leaks(text, allowed=used)}")
    assert not failures, "\n".join(failures)
    assert Run.objects.filter(tenant=world.tenant_b, external_id=world.ids["run"]).exists()
    _a_is_untouched(world)


def test_an_operation_whose_body_names_a_tenant_a_object_is_a_bare_404(world, client):
    failures = []
    operations = {str(op): op for op in matrix.api_operations()}
    for name, fields in matrix.BODY_OBJECTS.items():
        op = operations[name]
        used = [world.ids[kind] for kind in fields.values()]
        body = {**matrix.body_for(op), **{f: world.ids[kind] for f, kind in fields.items()}}
        response = call(client, op.method, op.path, key=world.key_b, body=body)
        failures += _not_found_problems(world, f"{op} (B's key)", response, used)
    assert not failures, "\n".join(failures)
    _a_is_untouched(world)


def test_every_list_operation_answers_tenant_b_nothing_of_tenant_a(world, client):
    failures, walked = [], 0
    session = browser_of(world.admin_b)
    for op in matrix.api_operations():
        if op.params or op.method != "GET":
            continue
        walked += 1
        callers = [("B's key", client, world.key_b)]
        if op.accepts_session:
            callers.append(("B's session", session, None))
        for who, caller, key in callers:
            response = call(caller, "GET", op.path, key=key)
            text = _body(response)
            if response.status_code != 200:
                failures.append(f"{op} ({who}): {response.status_code}: {text[:200]}")
            if world.leaks(text):
                failures.append(f"{op} ({who}): names A's {world.leaks(text)}")
    assert walked >= 7
    assert not failures, "\n".join(failures)


def _page(browser, url):
    response = browser.get(url)
    if response.status_code == 405:
        response = browser.post(url, {})
    return response


def test_every_page_on_a_tenant_a_id_is_404_with_nothing_of_a(world):
    failures, walked = [], 0
    browser = browser_of(world.admin_b)
    for page in matrix.pages():
        if not matrix.names_an_object(page.route, page.params):
            continue
        walked += 1
        url, used = world.fill(page.route, page.params, python=True)
        response = _page(browser, "/" + url)
        text = _body(response)
        if response.status_code != 404:
            failures.append(f"/{url}: {response.status_code}, not 404")
        if world.leaks(text, allowed=used):
            failures.append(f"/{url}: the page names A's {world.leaks(text, allowed=used)}")
    assert walked >= 12
    assert not failures, "\n".join(failures)
    _a_is_untouched(world)


def test_every_page_without_an_object_shows_tenant_b_nothing_of_tenant_a(world):
    failures, walked = [], 0
    browser = browser_of(world.admin_b)
    for page in matrix.pages():
        if matrix.names_an_object(page.route, page.params):
            continue
        url, used = world.fill(page.route, page.params, python=True)
        response = browser.get("/" + url)
        if response.status_code == 405:
            continue  # a POST-only action: nothing to read
        walked += 1
        text = _body(response)
        if response.status_code not in (200, 302):
            failures.append(f"/{url}: {response.status_code}")
        if world.leaks(text, allowed=used):
            failures.append(f"/{url}: the page names A's {world.leaks(text, allowed=used)}")
    assert walked >= 8
    assert not failures, "\n".join(failures)


async def _until_closed(communicator, timeout: float = 5):
    """(the close code, the frames sent before it)."""
    frames = []
    while True:
        output = await communicator.receive_output(timeout)
        if output["type"] == "websocket.close":
            return output.get("code"), frames
        frames.append(output.get("text") or output.get("bytes"))


@pytest.mark.django_db(transaction=True)
async def test_every_socket_on_a_tenant_a_id_is_refused_and_the_others_carry_nothing_of_a(
    settings,
):
    settings.PASSWORD_HASHERS = FAST_HASHER
    world = await sync_to_async(matrix.build_world)()
    failures, refused = [], 0
    for socket in matrix.sockets():
        url, used = await sync_to_async(world.fill)(socket.route, socket.params, python=True)
        communicator, connected = await open_socket("/" + url, world.admin_b)
        if matrix.names_an_object(socket.route, socket.params):
            refused += 1
            code, frames = ("refused", []) if not connected else await _until_closed(communicator)
            if code not in (4403, 4404, "refused"):
                failures.append(f"/{url}: closed with {code}, not 4403/4404")
            if frames:
                failures.append(f"/{url}: frames before the close: {frames[:2]}")
            continue
        if not connected:
            failures.append(f"/{url}: B's admin could not connect")
            continue
        frames = []
        while not await communicator.receive_nothing(timeout=0.3):
            frames.append(await communicator.receive_from())
        await communicator.disconnect()
        leaked = world.leaks("".join(frames))
        if leaked:
            failures.append(f"/{url}: frames name A's {leaked}")
    assert refused >= 2
    assert not failures, "\n".join(failures)
