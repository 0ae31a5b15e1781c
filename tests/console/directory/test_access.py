"""console/access.py, the tenancy boundary: capabilities, roles' decide-tool globs, keys and
their scopes (a `decide` or `manage` key acts as its bound principal), inactive principals,
self-approval, and the lookups (another tenant's object, or another principal's notification,
is 404 exactly like a missing one; a missing capability is 403)."""

from types import SimpleNamespace

import pytest
from django.contrib.auth.models import AnonymousUser

from approvals import access as approvals_access
from console.core.errors import Forbidden, NotFound
from console.directory import access
from console.models import CAPABILITIES, ApiKey, Role
from notifications import access as notifications_access
from notifications.models import Notification, NotificationKind
from runs import access as runs_access
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory, make_key

pytestmark = pytest.mark.django_db

# What each default role holds (the contract's defaults; `admin` implies every capability).
GRANTS = {
    "admin_a": {"view_runs", "decide", "view_budgets", "manage_budgets", "manage_rules", "admin"},
    "lead_a": {"view_runs", "decide", "view_budgets", "manage_budgets", "manage_rules"},
    "reviewer_a": {"view_runs", "decide"},
    "viewer_a": {"view_runs"},
}
# Every kind of viewer in tenant A, and what each may do there.
VIEWERS = (
    "admin_a",
    "lead_a",
    "reviewer_a",
    "viewer_a",
    "roleless_a",
    "ingest_key",
    "decide_key_of_reviewer",
    "decide_key_of_viewer",
    "ingest_and_decide_key_of_reviewer",
    "manage_key_of_lead",
)
SEES_RUNS = {"admin_a", "lead_a", "reviewer_a", "viewer_a", "ingest_key"}
SEES_RUNS |= {"ingest_and_decide_key_of_reviewer", "manage_key_of_lead"}
DECIDES = {"admin_a", "lead_a", "reviewer_a"}
DECIDES |= {"decide_key_of_reviewer", "ingest_and_decide_key_of_reviewer"}
SEES_APPROVALS = SEES_RUNS | DECIDES
WHOSE = ("another tenant's", "missing")

MAY_NOT_DECIDE = "you may not decide approvals"
SELF = "no one decides a call of a run that is for themselves"


def key_for(tenant, *scopes, principal=None) -> ApiKey:
    """The key as the API's auth loads it from its bearer token."""
    return ApiKey.objects.for_raw_key(make_key(tenant, scopes=scopes, principal=principal))


def role(tenant, name, *, capabilities, decide_tools) -> Role:
    return Role.objects.create(
        tenant=tenant, name=name, capabilities=capabilities, decide_tools=decide_tools
    )


def principal_with(tenant, *roles):
    principal = PrincipalFactory(tenant=tenant)
    principal.roles.add(*roles)
    return principal


def deciders_role(tenant, globs, name="deciders") -> Role:
    return role(tenant, name, capabilities=["view_runs", "decide"], decide_tools=globs)


def error_of(call) -> tuple:
    """The domain error a call raises, as the API would answer it."""
    with pytest.raises((NotFound, Forbidden)) as caught:
        call()
    error = caught.value
    return error.status, error.code, error.message


@pytest.fixture
def viewer(request, tenant_a):
    """A tenant-A viewer by name: a persona, a principal without roles, or an API key."""

    def make(name):
        if name in GRANTS:
            return request.getfixturevalue(name)
        if name == "roleless_a":
            return PrincipalFactory(tenant=tenant_a)
        if name == "ingest_key":
            return key_for(tenant_a, "ingest")
        holder = request.getfixturevalue(name.rsplit("_of_", 1)[1] + "_a")
        scopes = {
            "decide_key": ("decide",),
            "manage_key": ("manage",),
            "ingest_and_decide_key": ("ingest", "decide"),
        }[name.rsplit("_of_", 1)[0]]
        return key_for(tenant_a, *scopes, principal=holder)

    return make


@pytest.fixture
def run_a(tenant_a):
    return RunFactory(tenant=tenant_a, external_id="run_1")


@pytest.fixture
def run_b(tenant_b):
    """Tenant B's runs: one with the same id as tenant A's, and one only B holds."""
    RunFactory(tenant=tenant_b, external_id="run_1")
    return RunFactory(tenant=tenant_b, external_id="run_only_b")


@pytest.fixture
def approval_a(run_a):
    return ApprovalFactory(run=run_a, tool_name="email.send")


@pytest.fixture
def approval_b(run_b):
    return ApprovalFactory(run=run_b, tool_name="email.send")


def asked_id(whose, obj):
    return obj if whose == "another tenant's" else "nothing_here"


# --- capabilities ---


@pytest.mark.parametrize("capability", CAPABILITIES)
@pytest.mark.parametrize("persona", GRANTS)
def test_each_default_role_holds_exactly_its_capabilities(request, persona, capability):
    principal = request.getfixturevalue(persona)
    assert access.can(principal, capability) is (capability in GRANTS[persona])


@pytest.mark.parametrize("persona", GRANTS)
def test_capabilities_of_a_persona_are_its_roles_capabilities(request, persona):
    assert access.capabilities_of(request.getfixturevalue(persona)) == GRANTS[persona]


def test_admin_alone_implies_every_capability_and_every_tool(tenant_a):
    principal = principal_with(
        tenant_a, role(tenant_a, "root", capabilities=["admin"], decide_tools=[])
    )
    assert access.capabilities_of(principal) == set(CAPABILITIES)
    assert all(access.can(principal, capability) for capability in CAPABILITIES)
    assert access.can(principal, "decide", "shell.exec")


def test_a_principal_without_roles_holds_no_capability(tenant_a):
    principal = PrincipalFactory(tenant=tenant_a)
    assert access.capabilities_of(principal) == set()
    assert not any(access.can(principal, capability) for capability in CAPABILITIES)


def test_capabilities_of_several_roles_are_their_union(tenant_a):
    budgets = role(tenant_a, "budgets", capabilities=["view_budgets"], decide_tools=[])
    principal = principal_with(tenant_a, deciders_role(tenant_a, ["*"]), budgets)
    assert access.capabilities_of(principal) == {"view_runs", "decide", "view_budgets"}
    assert not access.can(principal, "manage_budgets")


def test_a_principal_is_never_granted_a_key_scope(admin_a):
    assert access.can(admin_a, "ingest") is False


def test_a_request_reads_the_viewers_roles_once(tenant_a, django_assert_num_queries):
    principal = principal_with(tenant_a, deciders_role(tenant_a, ["email.*"]))
    fresh = type(principal).objects.get(pk=principal.pk)
    with django_assert_num_queries(1):
        assert access.can(fresh, "view_runs")
        assert access.can(fresh, "decide", "email.send")
        assert not access.can(fresh, "decide", "shell.exec")
        assert access.capabilities_of(fresh) == {"view_runs", "decide"}
        assert access.roles_key(fresh)


# --- decide-tool globs ---


@pytest.mark.parametrize(
    "globs, tool, allowed",
    [
        (["email.*"], "email.send", True),
        (["email.*"], "shell.exec", False),
        (["email.*"], "email", False),
        (["email.*"], "EMAIL.send", False),  # globs are case-sensitive
        (["send_email"], "send_email", True),
        (["send_email"], "send_emails", False),
        (["refund_?"], "refund_7", True),
        (["*"], "shell.exec", True),
        (["*"], "email.send", True),
        ([], "email.send", False),
        ([], "shell.exec", False),
    ],
)
@pytest.mark.parametrize("as_key", [False, True], ids=["principal", "decide key"])
def test_a_roles_decide_tools_are_globs_of_the_tools_it_may_decide(
    tenant_a, globs, tool, allowed, as_key
):
    principal = principal_with(tenant_a, deciders_role(tenant_a, globs))
    viewer = key_for(tenant_a, "decide", principal=principal) if as_key else principal
    assert access.can(viewer, "decide", tool) is allowed
    assert access.can(viewer, "decide") is True  # the capability, whatever the tool
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name=tool)
    expected = None if allowed else f"none of your roles may decide the tool '{tool}'"
    assert approvals_access.decide_refusal(viewer, approval) == expected


@pytest.mark.parametrize(
    "tool, allowed",
    [("email.send", True), ("calendar.read", True), ("shell.exec", False)],
)
def test_several_roles_may_decide_the_union_of_their_globs(tenant_a, tool, allowed):
    principal = principal_with(
        tenant_a,
        deciders_role(tenant_a, ["email.*"], name="mail"),
        deciders_role(tenant_a, ["calendar.*"], name="calendar"),
    )
    assert access.can(principal, "decide", tool) is allowed


def test_globs_without_the_decide_capability_decide_nothing(tenant_a):
    principal = principal_with(
        tenant_a, role(tenant_a, "watchers", capabilities=["view_runs"], decide_tools=["*"])
    )
    assert access.can(principal, "decide", "email.send") is False
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="email.send")
    assert approvals_access.decide_refusal(principal, approval) == MAY_NOT_DECIDE


def test_deciding_a_tool_needs_one_role_with_both_decide_and_a_matching_glob(tenant_a):
    principal = principal_with(
        tenant_a,
        deciders_role(tenant_a, [], name="triage"),
        role(tenant_a, "mail-watchers", capabilities=["view_runs"], decide_tools=["email.*"]),
    )
    assert access.can(principal, "decide", "email.send") is False


# --- keys ---

KEY_GRANTS = {
    ("ingest",): {"ingest", "view_runs"},
    ("decide",): {"decide"},
    ("ingest", "decide"): {"ingest", "view_runs", "decide"},
    # The principal's capabilities but deciding (a door of its own) and ingesting.
    ("manage",): {"view_runs", "view_budgets", "manage_budgets", "manage_rules", "admin"},
}


@pytest.mark.parametrize("capability", (*CAPABILITIES, "ingest"))
@pytest.mark.parametrize("scopes", KEY_GRANTS, ids="+".join)
def test_a_key_holds_what_its_scopes_give_even_when_bound_to_an_admin(
    tenant_a, admin_a, scopes, capability
):
    key = key_for(tenant_a, *scopes, principal=admin_a)
    assert access.can(key, capability) is (capability in KEY_GRANTS[scopes])


def test_a_decide_key_decides_as_its_principal_under_that_principals_roles(tenant_a):
    mail = principal_with(tenant_a, deciders_role(tenant_a, ["email.*"]))
    key = key_for(tenant_a, "decide", principal=mail)
    assert access.can(key, "decide", "email.send") is True
    assert access.can(key, "decide", "shell.exec") is False


def test_a_decide_key_of_a_principal_who_may_not_decide_decides_nothing(tenant_a, viewer_a):
    key = key_for(tenant_a, "decide", principal=viewer_a)
    assert access.can(key, "decide") is False
    assert access.can(key, "decide", "email.send") is False


def test_a_decide_key_without_a_principal_decides_nothing(tenant_a):
    # The service refuses to make one; the check does not rely on it.
    key = ApiKey(tenant=tenant_a, name="unbound", scopes=["decide"], principal=None)
    assert access.can(key, "decide") is False
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    assert approvals_access.decide_refusal(key, approval) == MAY_NOT_DECIDE


@pytest.mark.parametrize("name", ["reviewer_a", "ingest_key", "decide_key_of_reviewer"])
def test_tenant_of_a_viewer_is_its_tenant(viewer, tenant_a, name):
    assert access.tenant_of(viewer(name)) == tenant_a


def test_require_scope_passes_a_held_scope_and_forbids_a_missing_one(tenant_a):
    key = key_for(tenant_a, "ingest")
    assert access.require_scope(key, "ingest") is None
    assert error_of(lambda: access.require_scope(key, "decide")) == (
        403,
        "missing_scope",
        "this API key lacks the 'decide' scope",
    )


@pytest.mark.parametrize(
    "capability, sentence",
    [
        ("view_runs", "you may not view runs"),
        ("decide", "you may not decide"),
        ("manage_budgets", "you may not manage budgets"),
        ("manage_rules", "you may not manage rules"),
        ("admin", "you may not admin"),
    ],
)
def test_require_forbids_a_missing_capability_in_a_sentence(tenant_a, capability, sentence):
    roleless = PrincipalFactory(tenant=tenant_a)
    assert error_of(lambda: access.require(roleless, capability)) == (403, "forbidden", sentence)


def test_require_passes_a_held_capability(lead_a):
    assert access.require(lead_a, "manage_budgets") is None


def test_require_capability_names_the_missing_capability(tenant_a, reviewer_a, lead_a):
    assert access.require_capability(lead_a, "manage_rules") is None
    assert error_of(lambda: access.require_capability(reviewer_a, "manage_rules")) == (
        403,
        "forbidden",
        "you may not manage rules: none of your roles has the 'manage_rules' capability",
    )


@pytest.mark.parametrize(
    "name, acts_as",
    [
        ("reviewer_a", "reviewer_a"),
        ("decide_key_of_reviewer", "reviewer_a"),
        ("manage_key_of_lead", "lead_a"),
        ("ingest_key", None),  # a runtime's key acts as no one
    ],
)
def test_acting_principal_is_the_viewer_or_the_principal_its_key_is_bound_to(
    request, viewer, name, acts_as
):
    expected = request.getfixturevalue(acts_as) if acts_as else None
    assert access.acting_principal(viewer(name)) == expected


# --- inactive principals and signed-in users ---


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_an_inactive_principal_may_do_nothing(admin_a, capability):
    admin_a.is_active = False
    admin_a.save(update_fields=["is_active"])
    assert access.can(admin_a, capability) is False
    assert access.can(admin_a, "decide", "email.send") is False


def test_an_inactive_principal_sees_no_runs_and_decides_nothing(tenant_a, reviewer_a, approval_a):
    raw = make_key(tenant_a, scopes=("decide",), principal=reviewer_a)
    reviewer_a.is_active = False
    reviewer_a.save(update_fields=["is_active"])
    key = ApiKey.objects.for_raw_key(raw)  # the next request loads it again
    assert error_of(lambda: runs_access.runs_visible_to(viewer=reviewer_a))[:2] == (
        403,
        "forbidden",
    )
    assert approvals_access.decide_refusal(reviewer_a, approval_a) == MAY_NOT_DECIDE
    assert access.can(key, "decide") is False
    assert approvals_access.decide_refusal(key, approval_a) == MAY_NOT_DECIDE


def signed_in(user):
    """A request as the principal lookup reads it: the login and its session."""
    return SimpleNamespace(user=user, session={})


def test_principal_for_user_is_the_active_principal_of_a_signed_in_user(admin_a):
    user = type(admin_a.user).objects.get(pk=admin_a.user_id)
    assert access.principal_for_user(signed_in(user)) == admin_a


@pytest.mark.parametrize("who", ["nobody", "anonymous", "a user without a principal"])
def test_principal_for_user_is_none_without_a_principal(django_user_model, who):
    user = {
        "nobody": None,
        "anonymous": AnonymousUser(),
        "a user without a principal": django_user_model.objects.create_user(username="loner"),
    }[who]
    assert access.principal_for_user(signed_in(user)) is None


@pytest.mark.parametrize("inactive", ["principal", "user"])
def test_principal_for_user_is_none_when_the_principal_or_the_user_is_inactive(admin_a, inactive):
    user = admin_a.user
    target = admin_a if inactive == "principal" else user
    target.is_active = False
    target.save(update_fields=["is_active"])
    user = type(user).objects.get(pk=user.pk)
    assert access.principal_for_user(signed_in(user)) is None


def test_roles_key_is_the_same_for_the_same_roles_and_differs_otherwise(
    tenant_a, reviewer_a, viewer_a
):
    another_reviewer = PrincipalFactory(tenant=tenant_a, role="reviewer")
    assert access.roles_key(another_reviewer) == access.roles_key(reviewer_a)
    assert access.roles_key(viewer_a) != access.roles_key(reviewer_a)
    assert access.roles_key(PrincipalFactory(tenant=tenant_a)) == ""
    both = PrincipalFactory(tenant=tenant_a, role="reviewer")
    both.roles.add(Role.objects.get(tenant=tenant_a, name="viewer"))
    ids = sorted(str(r.pk) for r in Role.objects.filter(name__in=["reviewer", "viewer"]))
    assert access.roles_key(both) == ",".join(ids)


# --- self-approval ---


@pytest.mark.parametrize("allowed", [False, True], ids=["not allowed", "tenant allows it"])
@pytest.mark.parametrize("name", ["admin_a", "lead_a", "reviewer_a", "decide_key_of_reviewer"])
def test_a_run_for_yourself_is_decided_only_where_the_tenant_allows_it(
    viewer, tenant_a, name, allowed
):
    who = viewer(name)
    principal = who.principal if isinstance(who, ApiKey) else who
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a, principal=principal))
    tenant_a.allow_self_approval = allowed
    tenant_a.save(update_fields=["allow_self_approval"])
    loaded = approvals_access.approval_for(viewer=who, approval_id=approval.public_id)
    assert approvals_access.decide_refusal(who, loaded) == (None if allowed else SELF)
    if allowed:
        assert (
            approvals_access.approval_for_decider(viewer=who, approval_id=approval.public_id)
            == approval
        )
    else:
        found = error_of(
            lambda: approvals_access.approval_for_decider(
                viewer=who, approval_id=approval.public_id
            )
        )
        assert found == (403, "may_not_decide", SELF)


def test_someone_elses_run_is_not_self_approval(reviewer_a, lead_a, tenant_a):
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a, principal=lead_a))
    assert approvals_access.decide_refusal(reviewer_a, approval) is None
    assert approvals_access.decide_refusal(lead_a, approval) == SELF


# --- decide_refusal, may_decide ---


@pytest.mark.parametrize("name", VIEWERS)
def test_decide_refusal_says_why_each_viewer_may_not_decide(viewer, approval_a, name):
    expected = {
        "viewer_a": MAY_NOT_DECIDE,
        "roleless_a": MAY_NOT_DECIDE,
        "ingest_key": "this API key lacks the 'decide' scope",
        "decide_key_of_viewer": MAY_NOT_DECIDE,
        "manage_key_of_lead": "this API key lacks the 'decide' scope",
    }.get(name)
    assert (name in DECIDES) is (expected is None)
    assert approvals_access.decide_refusal(viewer(name), approval_a) == expected


@pytest.mark.parametrize("name", VIEWERS)
def test_may_decide_forbids_with_the_refusal_or_passes(viewer, approval_a, name):
    who = viewer(name)
    if name in DECIDES:
        assert approvals_access.may_decide(who, approval_a) is None
    else:
        reason = approvals_access.decide_refusal(who, approval_a)
        assert error_of(lambda: approvals_access.may_decide(who, approval_a)) == (
            403,
            "may_not_decide",
            reason,
        )


@pytest.mark.parametrize("name", ["reviewer_b", "admin_a"])
def test_may_decide_on_another_tenants_approval_is_404_before_any_refusal(
    request, approval_a, approval_b, name
):
    who = request.getfixturevalue(name)
    other = approval_a if name == "reviewer_b" else approval_b
    assert error_of(lambda: approvals_access.may_decide(who, other)) == (
        404,
        "approval_not_found",
        f"no approval '{other.public_id}'",
    )


# --- lookups: runs ---


@pytest.mark.parametrize("name", VIEWERS)
def test_runs_visible_to_is_the_viewers_tenant_only_or_forbidden(viewer, run_a, run_b, name):
    who = viewer(name)
    if name in SEES_RUNS:
        runs = list(runs_access.runs_visible_to(viewer=who))
        assert runs == [run_a]
        assert runs[0].get_deferred_fields() == {"snapshot"}
    else:
        assert error_of(lambda: runs_access.runs_visible_to(viewer=who)) == (
            403,
            "forbidden",
            "you may not view runs",
        )


@pytest.mark.parametrize("name", VIEWERS)
def test_run_for_own_tenant_is_the_run_or_forbidden(viewer, run_a, run_b, name):
    who = viewer(name)
    if name in SEES_RUNS:
        run = runs_access.run_for(viewer=who, run_id="run_1")
        assert run == run_a and run.tenant_id == run_a.tenant_id
        assert run.get_deferred_fields() == {"snapshot"}
    else:
        assert error_of(lambda: runs_access.run_for(viewer=who, run_id="run_1")) == (
            403,
            "forbidden",
            "you may not view runs",
        )


@pytest.mark.parametrize("whose", WHOSE)
@pytest.mark.parametrize("name", VIEWERS)
def test_run_for_another_tenants_run_is_404_exactly_like_a_missing_one(
    viewer, run_a, run_b, name, whose
):
    """Also for viewers who may not view runs at all: 404 comes before 403."""
    who = viewer(name)
    run_id = asked_id(whose, run_b.external_id)
    assert error_of(lambda: runs_access.run_for(viewer=who, run_id=run_id)) == (
        404,
        "run_not_found",
        f"no run '{run_id}'",
    )


def test_run_for_update_is_the_same_run(reviewer_a, run_a):
    assert runs_access.run_for(viewer=reviewer_a, run_id="run_1", for_update=True) == run_a


def test_run_in_tenant_is_the_tenants_run(tenant_a, run_a, run_b):
    run = runs_access.run_in_tenant(tenant_id=tenant_a.pk, run_id="run_1")
    assert run == run_a
    assert run.get_deferred_fields() == {"snapshot"}


def test_run_in_tenant_for_update_carries_its_tenant_and_principal(
    tenant_a, run_a, django_assert_num_queries
):
    run = runs_access.run_in_tenant(tenant_id=tenant_a.pk, run_id="run_1", for_update=True)
    with django_assert_num_queries(0):
        assert (run.tenant.slug, run.principal.external_id) == (
            "tenant-a",
            run_a.principal.external_id,
        )


@pytest.mark.parametrize("for_update", [False, True])
@pytest.mark.parametrize("whose", WHOSE)
def test_run_in_tenant_of_another_tenants_run_is_404_exactly_like_a_missing_one(
    tenant_a, run_a, run_b, whose, for_update
):
    run_id = asked_id(whose, run_b.external_id)
    found = error_of(
        lambda: runs_access.run_in_tenant(
            tenant_id=tenant_a.pk, run_id=run_id, for_update=for_update
        )
    )
    assert found == (404, "run_not_found", f"no run '{run_id}'")


def test_run_locked_is_the_tenants_run_with_its_tenant_and_principal(
    tenant_a, run_a, run_b, django_assert_num_queries
):
    run = runs_access.run_locked(tenant_id=tenant_a.pk, run_id="run_1")
    assert run == run_a and run.get_deferred_fields() == {"snapshot"}
    with django_assert_num_queries(0):
        assert (run.tenant.slug, run.principal.external_id) == (
            "tenant-a",
            run_a.principal.external_id,
        )


def test_run_locked_loads_what_the_caller_names(tenant_a, run_a, django_assert_num_queries):
    run = runs_access.run_locked(
        tenant_id=tenant_a.pk, run_id="run_1", related=("agent",), defer=()
    )
    assert run.get_deferred_fields() == set()
    with django_assert_num_queries(0):
        assert run.agent.external_id == run_a.agent.external_id
    with django_assert_num_queries(1):
        assert run.tenant.slug == "tenant-a"


@pytest.mark.parametrize("whose", WHOSE)
def test_run_locked_of_another_tenants_run_is_none_like_a_missing_one(
    tenant_a, run_a, run_b, whose
):
    assert (
        runs_access.run_locked(tenant_id=tenant_a.pk, run_id=asked_id(whose, "run_only_b")) is None
    )


def test_approval_in_tenant_passes_the_tenants_own(tenant_a, approval_a):
    assert (
        approvals_access.approval_in_tenant(tenant_id=tenant_a.pk, approval_id=approval_a.public_id)
        is None
    )


@pytest.mark.parametrize("whose", WHOSE)
def test_approval_in_tenant_of_another_tenants_approval_is_404_like_a_missing_one(
    tenant_a, approval_b, whose
):
    approval_id = asked_id(whose, approval_b.public_id)
    assert error_of(
        lambda: approvals_access.approval_in_tenant(tenant_id=tenant_a.pk, approval_id=approval_id)
    ) == (404, "approval_not_found", f"no approval '{approval_id}'")


def test_both_tenants_may_hold_the_same_run_id_and_each_sees_its_own(
    tenant_a, tenant_b, reviewer_a, reviewer_b, run_a, run_b
):
    mine = runs_access.run_for(viewer=reviewer_a, run_id="run_1")
    theirs = runs_access.run_for(viewer=reviewer_b, run_id="run_1")
    assert (mine.tenant_id, theirs.tenant_id) == (tenant_a.pk, tenant_b.pk)
    assert mine != theirs


# --- lookups: approvals ---


@pytest.mark.parametrize("name", VIEWERS)
def test_approvals_visible_to_is_the_viewers_tenant_only_or_forbidden(
    viewer, approval_a, approval_b, name
):
    who = viewer(name)
    if name in SEES_APPROVALS:
        assert list(approvals_access.approvals_visible_to(viewer=who)) == [approval_a]
    else:
        assert error_of(lambda: approvals_access.approvals_visible_to(viewer=who)) == (
            403,
            "forbidden",
            "you may not view approvals",
        )


@pytest.mark.parametrize("name", VIEWERS)
def test_approval_for_own_tenant_is_the_approval_or_forbidden(
    viewer, approval_a, name, django_assert_num_queries
):
    who = viewer(name)
    if name in SEES_APPROVALS:
        approval = approvals_access.approval_for(viewer=who, approval_id=approval_a.public_id)
        assert approval == approval_a
        with django_assert_num_queries(0):
            assert approval.run.external_id == "run_1"
    else:
        assert error_of(
            lambda: approvals_access.approval_for(viewer=who, approval_id=approval_a.public_id)
        ) == (403, "forbidden", "you may not view approvals")


@pytest.mark.parametrize(
    "lookup", [approvals_access.approval_for, approvals_access.approval_for_decider]
)
@pytest.mark.parametrize("whose", WHOSE)
@pytest.mark.parametrize("name", VIEWERS)
def test_another_tenants_approval_is_404_exactly_like_a_missing_one(
    viewer, approval_a, approval_b, name, whose, lookup
):
    who = viewer(name)
    approval_id = asked_id(whose, approval_b.public_id)
    assert error_of(lambda: lookup(viewer=who, approval_id=approval_id)) == (
        404,
        "approval_not_found",
        f"no approval '{approval_id}'",
    )


@pytest.mark.parametrize("name", VIEWERS)
def test_approval_for_decider_is_the_approval_for_those_who_may_decide_it(
    viewer, approval_a, name, django_assert_num_queries
):
    who = viewer(name)
    if name in DECIDES:
        approval = approvals_access.approval_for_decider(
            viewer=who, approval_id=approval_a.public_id
        )
        assert approval == approval_a
        with django_assert_num_queries(0):
            assert approval.run.tenant.slug == "tenant-a"
    else:
        code = error_of(
            lambda: approvals_access.approval_for_decider(
                viewer=who, approval_id=approval_a.public_id
            )
        )
        assert code == (403, "may_not_decide", approvals_access.decide_refusal(who, approval_a))


def test_approval_for_decider_refuses_a_tool_no_role_may_decide(tenant_a, approval_a):
    shell_only = principal_with(tenant_a, deciders_role(tenant_a, ["shell.*"]))
    assert error_of(
        lambda: approvals_access.approval_for_decider(
            viewer=shell_only, approval_id=approval_a.public_id
        )
    ) == (403, "may_not_decide", "none of your roles may decide the tool 'email.send'")


# --- notifications: a principal's own ---


def notify(principal, title="Budget at 80%"):
    return Notification.objects.create(
        tenant=principal.tenant,
        principal=principal,
        kind=NotificationKind.BUDGET_THRESHOLD_CROSSED,
        title=title,
        url="https://console.example/budgets/",
    )


@pytest.mark.parametrize(
    "name", ["reviewer_a", "decide_key_of_reviewer", "ingest_and_decide_key_of_reviewer"]
)
def test_notifications_of_a_viewer_are_its_principals_own(
    viewer, reviewer_a, viewer_a, reviewer_b, name
):
    mine = [notify(reviewer_a, "one"), notify(reviewer_a, "two")]
    notify(viewer_a)  # a colleague's
    notify(reviewer_b)  # another tenant's
    found = notifications_access.notifications_of(viewer=viewer(name)).order_by("id")
    assert [n.public_id for n in found] == [n.public_id for n in mine]


def test_a_manage_key_reads_its_principals_notifications(viewer, lead_a):
    own = notify(lead_a)
    found = notifications_access.notifications_of(viewer=viewer("manage_key_of_lead"))
    assert [n.public_id for n in found] == [own.public_id]


@pytest.mark.parametrize("who", ["ingest_key", "inactive reviewer"])
def test_notifications_are_forbidden_to_a_key_or_principal_that_is_no_active_one(
    viewer, reviewer_a, who
):
    notify(reviewer_a)
    if who == "inactive reviewer":
        reviewer_a.is_active = False
        reviewer_a.save(update_fields=["is_active"])
        asking = reviewer_a
    else:
        asking = viewer(who)
    assert error_of(lambda: notifications_access.notifications_of(viewer=asking)) == (
        403,
        "forbidden",
        "notifications are a principal's: this key is bound to no active one",
    )


def test_notification_for_is_one_of_the_viewers_own(reviewer_a):
    own = notify(reviewer_a)
    assert (
        notifications_access.notification_for(viewer=reviewer_a, notification_id=own.public_id)
        == own
    )


@pytest.mark.parametrize("whose", ["a colleague's", "another tenant's", "missing"])
def test_anyone_elses_notification_is_404_exactly_like_a_missing_one(
    reviewer_a, viewer_a, reviewer_b, whose
):
    notification_id = {
        "a colleague's": lambda: notify(viewer_a).public_id,
        "another tenant's": lambda: notify(reviewer_b).public_id,
        "missing": lambda: "ntf_nothing_here",
    }[whose]()
    assert error_of(
        lambda: notifications_access.notification_for(
            viewer=reviewer_a, notification_id=notification_id
        )
    ) == (404, "notification_not_found", f"no notification '{notification_id}'")


# --- manage keys (capabilities through a key's bound principal) ---


def key_of(raw):
    return ApiKey.objects.for_raw_key(raw)


@pytest.mark.django_db
def test_a_manage_key_has_the_capabilities_of_its_principals_roles(tenant_a, lead_a, viewer_a):
    lead_key = key_of(make_key(tenant_a, scopes=("manage",), principal=lead_a))
    viewer_key = key_of(make_key(tenant_a, scopes=("manage",), principal=viewer_a))
    for cap in ("view_budgets", "manage_budgets", "manage_rules"):
        assert access.can(lead_key, cap)
        access.require_capability(lead_key, cap)
        assert not access.can(viewer_key, cap)
        with pytest.raises(Forbidden, match=f"'{cap}' capability"):
            access.require_capability(viewer_key, cap)
    assert not access.can(lead_key, "admin")


@pytest.mark.django_db
def test_admin_implies_every_capability(tenant_a, admin_a):
    key = key_of(make_key(tenant_a, scopes=("manage",), principal=admin_a))
    for cap in ("view_budgets", "manage_budgets", "manage_rules", "admin"):
        assert access.can(key, cap)
        assert access.can(admin_a, cap)


@pytest.mark.django_db
def test_keys_without_the_manage_scope_hold_no_management_capability(tenant_a, lead_a):
    ingest = key_of(make_key(tenant_a, scopes=("ingest",)))
    decide = key_of(make_key(tenant_a, scopes=("decide",), principal=lead_a))
    for key in (ingest, decide):
        for cap in ("view_budgets", "manage_budgets", "manage_rules", "admin"):
            assert not access.can(key, cap)
    assert access.can(ingest, "view_runs")
    assert access.can(decide, "decide", "send_email")
    assert not access.can(decide, "view_runs")  # a decide key reads approvals, not runs


@pytest.mark.django_db
def test_a_manage_key_of_a_deactivated_principal_may_do_nothing(tenant_a):
    lena = PrincipalFactory(tenant=tenant_a, external_id="lena", role="lead")
    raw = make_key(tenant_a, scopes=("manage",), principal=lena)
    assert access.can(key_of(raw), "view_budgets")
    lena.is_active = False
    lena.save()
    key = key_of(raw)
    assert not access.can(key, "view_budgets")
    assert access.acting_principal(key) == lena


@pytest.mark.django_db
def test_a_manage_key_does_not_decide(tenant_a, lead_a):
    key = key_of(make_key(tenant_a, scopes=("manage",), principal=lead_a))
    assert not access.can(key, "decide", "send_email")


# --- decidable: the batch form of decide_refusal ---


def test_decidable_is_exactly_the_calls_decide_refusal_lets_each_viewer_decide(
    viewer, tenant_a, reviewer_a, lead_a
):
    """Every kind of viewer against a mixed batch (tools a role's globs do and do not name, a
    run for the viewer itself, budget overrides with and without leads, a misnamed override):
    the batch answer is the single-call answer for each call, in the batch's order."""
    from budgets.models import OVERRIDE_TOOL, Budget, BudgetOverride

    mailers = principal_with(tenant_a, deciders_role(tenant_a, ["email.*"]))
    people = [viewer(name) for name in VIEWERS] + [mailers]
    budget = Budget.objects.create(
        tenant=tenant_a, name="b", scope_type="tenant", period="day", ceiling_minor_units=1
    )
    led = Budget.objects.create(
        tenant=tenant_a, name="led", scope_type="tenant", period="week", ceiling_minor_units=1
    )
    led.leads.add(reviewer_a)
    others, for_reviewer = (
        RunFactory(tenant=tenant_a),
        RunFactory(tenant=tenant_a, principal=reviewer_a),
    )
    for_mailers = RunFactory(tenant=tenant_a, principal=mailers)
    approvals = [
        ApprovalFactory(run=run, tool_name=tool)
        for run in (others, for_reviewer, for_mailers)
        for tool in ("email.send", "email.delete", "shell.exec", "email.send")
    ]
    for run, which in ((others, budget), (for_reviewer, led), (others, led)):
        override = ApprovalFactory(run=run, tool_name=OVERRIDE_TOOL)
        BudgetOverride.objects.create(
            approval=override, budget=which, run=run, estimated_cost_minor_units=5
        )
        approvals.append(override)
    approvals.append(ApprovalFactory(run=others, tool_name=OVERRIDE_TOOL))  # no budget asked
    loaded = list(
        approvals_access.approvals_visible_to(viewer=lead_a)
        .filter(pk__in=[a.pk for a in approvals])
        .select_related("run", "run__tenant")
        .order_by("-id")  # not creation order: the answer keeps the order given
    )
    answers = set()
    for allowed in (False, True):
        tenant_a.allow_self_approval = allowed
        tenant_a.save(update_fields=["allow_self_approval"])
        for call in loaded:
            call.run.tenant.allow_self_approval = allowed
        for who in people:
            expected = [a for a in loaded if approvals_access.decide_refusal(who, a) is None]
            assert approvals_access.decidable(who, loaded) == expected
            answers.add(len(expected))
    assert len(answers) > 3  # the viewers really differ (no vacuous equality of empty lists)
