"""Issue 14, the role matrix: for every API operation and page that needs a capability (read off
its auth object, else tests/support/matrix.py's tables), a principal of the same tenant whose
role holds every other capability (never `admin`, which implies them all) is refused with 403,
while one that holds it gets through; a key without the scope an operation needs is 403 before
anything else (a missing object, a bad body); and each such 403 is audited `authz.refused`."""

import json

import pytest
from django.test import Client

from console.models import ApiKey, AuditEvent
from tests.support import matrix
from tests.support.factories import make_key

FAST_HASHER = ["django.contrib.auth.hashers.MD5PasswordHasher"]
ALL_SCOPES = ("ingest", "decide", "manage")


@pytest.fixture
def world(db, settings):
    settings.PASSWORD_HASHERS = FAST_HASHER
    settings.GAVEL_WEBHOOK_ALLOW_HTTP = True
    return matrix.build_world()


def call(client, method, url, *, key=None, body=None, raw=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    send = getattr(client, method.lower())
    if raw is None and body is None:
        return send(url, headers=headers)
    data = raw if raw is not None else json.dumps(body)
    return send(url, data, content_type="application/json", headers=headers)


def _code(response):
    try:
        return json.loads(response.content)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


class Principals:
    """One principal lacking (and one holding) each set of capabilities, made once."""

    def __init__(self, tenant):
        self.tenant = tenant
        self.made = {}

    def get(self, caps, *, lacking: bool):
        if (caps, lacking) not in self.made:
            make = matrix.lacking if lacking else matrix.holding
            principal = make(self.tenant, caps)
            browser = Client()
            browser.force_login(principal.user)
            self.made[caps, lacking] = (principal, browser)
        return self.made[caps, lacking]


def api_refusals(world, client, *, controls=True):
    """Each API operation that needs a capability, called as a key (and a browser session,
    where it takes one) of a principal lacking it, then of one holding it: yields
    (label, the refused answer, the 403 code expected, the control's answer, the actor)."""
    principals = Principals(world.tenant_a)
    for op in matrix.api_operations():
        needs, code = matrix.operation_needs(op)
        if not needs:
            continue
        url, used = world.fill(op.path, op.params, python=False)
        body = matrix.body_for(op, used)
        scopes = sorted(op.key_scopes) or ["manage"]
        refused, refused_browser = principals.get(needs, lacking=True)
        key = make_key(world.tenant_a, scopes=scopes, principal=refused)
        answer = call(client, op.method, url, key=key, body=body)
        key_row = ApiKey.objects.for_raw_key(key)
        control = None
        if controls:
            allowed, allowed_browser = principals.get(needs, lacking=False)
            control_key = make_key(world.tenant_a, scopes=scopes, principal=allowed)
            control = call(client, op.method, url, key=control_key, body=body)
        yield f"{op} (key without {'/'.join(sorted(needs))})", answer, code, control, key_row
        if op.accepts_session:
            answer = call(refused_browser, op.method, url, body=body)
            control = call(allowed_browser, op.method, url, body=body) if controls else None
            yield (
                f"{op} (session without {'/'.join(sorted(needs))})",
                answer,
                code,
                control,
                refused,
            )


def _page(browser, url):
    response = browser.get(url)
    if response.status_code == 405:
        response = browser.post(url, {})
    return response


def page_refusals(world, *, controls=True):
    """The same for every page, as a signed-in browser."""
    principals = Principals(world.tenant_a)
    for page in matrix.pages():
        needs = matrix.page_needs(page)
        if not needs:
            continue
        url, _ = world.fill(page.route, page.params, python=True)
        refused, refused_browser = principals.get(needs, lacking=True)
        answer = _page(refused_browser, "/" + url)
        control = None
        if controls:
            control = _page(principals.get(needs, lacking=False)[1], "/" + url)
        yield f"/{url} (without {'/'.join(sorted(needs))})", answer, "forbidden", control, refused


def scope_refusals(world, client):
    """Each operation's key scope missing, with an id that exists nowhere and a body that is
    not JSON: 403 `missing_scope` comes first."""
    for op in matrix.api_operations():
        for scope in sorted(op.key_scopes):
            scopes = [s for s in ALL_SCOPES if s != scope]
            key = make_key(world.tenant_a, scopes=scopes, principal=world.admin_a)
            key_row = ApiKey.objects.for_raw_key(key)
            url = op.path
            for param in op.params:
                url = url.replace("{" + param + "}", "no_such_object")
            body = "{not json" if op.body_schema is not None else None
            answer = call(client, op.method, url, key=key, raw=body)
            yield f"{op} (key without '{scope}')", answer, "missing_scope", None, key_row


def _problems(refusals, *, pages=False) -> tuple[int, list[str]]:
    walked, problems = 0, []
    for label, answer, code, control, _ in refusals:
        walked += 1
        if answer.status_code != 403:
            problems.append(f"{label}: {answer.status_code}, not 403: {answer.content[:160]}")
        elif not pages and _code(answer) != code:
            problems.append(f"{label}: 403 '{_code(answer)}', not '{code}'")
        if control is not None and control.status_code == 403:
            problems.append(
                f"{label}: the control holding it is refused too: {control.content[:160]}"
            )
    return walked, problems


def test_every_api_operation_needing_a_capability_is_403_without_it(world, client):
    walked, problems = _problems(api_refusals(world, client))
    assert walked >= 18
    assert not problems, "\n".join(problems)


def test_every_page_needing_a_capability_is_403_without_it(world):
    walked, problems = _problems(page_refusals(world), pages=True)
    assert walked >= 20
    assert not problems, "\n".join(problems)


def test_a_key_without_the_scope_an_operation_needs_is_403_before_anything_else(world, client):
    walked, problems = _problems(scope_refusals(world, client))
    assert walked == sum(len(op.key_scopes) for op in matrix.api_operations()) >= 29
    assert not problems, "\n".join(problems)


def test_each_capability_is_required_somewhere():
    """The matrix proves something for every capability: each is some operation's or page's
    only way in."""
    needed = {cap for op in matrix.api_operations() for cap in matrix.operation_needs(op)[0]}
    needed |= {cap for page in matrix.pages() for cap in matrix.page_needs(page)}
    assert needed == set(matrix.CAPABILITIES)


def test_an_operation_whose_capability_is_unknown_fails_saying_where_to_declare_it():
    unknown = matrix.Operation(
        method="GET", path="/api/v1/gizmos", operation_id="gizmos", params=(), body_schema=None
    )
    with pytest.raises(AssertionError, match="HANDLER_CAPABILITIES"):
        matrix.operation_needs(unknown)
    with pytest.raises(AssertionError, match="PAGE_CAPABILITIES"):
        matrix.page_needs(matrix.Page(route="gizmos/", params=()))


def _unaudited(world, refusals) -> list[str]:
    """Each refused request's actor (its key, else its signed-in principal) has an
    `authz.refused` entry, and there are at least as many entries as refused (actor, path)
    pairs: the audit log may fold repeats of one actor on one path into one entry (its
    `count`), never drop a pair."""
    missing, pairs = [], set()
    entries = AuditEvent.objects.filter(tenant=world.tenant_a, action="authz.refused")
    for label, answer, _, _, actor in refusals:
        if answer.status_code != 403:
            continue
        path = answer.wsgi_request.path
        if isinstance(actor, ApiKey):
            pairs.add((f"key {actor.pk}", path))
            found = entries.filter(actor_key=actor).exists()
        else:
            pairs.add((f"principal {actor.pk}", path))
            found = entries.filter(actor_principal=actor, actor_key=None).exists()
        if not found:
            missing.append(f"{label}: no authz.refused entry with its actor")
    if entries.count() < len(pairs):
        missing.append(f"{entries.count()} authz.refused entries for {len(pairs)} refused pairs")
    return missing


def test_every_refused_api_call_is_audited_authz_refused(world, client):
    refusals = [*api_refusals(world, client, controls=False), *scope_refusals(world, client)]
    assert sum(1 for _, answer, *_ in refusals if answer.status_code == 403) >= 40
    missing = _unaudited(world, refusals)
    assert not missing, "\n".join(missing)


def test_every_refused_page_is_audited_authz_refused(world):
    refusals = list(page_refusals(world, controls=False))
    assert sum(1 for _, answer, *_ in refusals if answer.status_code == 403) >= 20
    missing = _unaudited(world, refusals)
    assert not missing, "\n".join(missing)
