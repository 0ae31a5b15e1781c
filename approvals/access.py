"""Approvals' tenant scoping and decision rules: held calls, who may decide them (tool globs,
self-approval, budget overrides, Slack), lasting rules and webhooks. Another tenant's object is
NotFound (404), like a missing one; a missing capability is Forbidden (403). The viewer and its
capabilities are console.directory.access's; this module applies that one rule here."""

from fnmatch import fnmatchcase

from django.db.models import Exists, OuterRef, Q, QuerySet

from approvals.models import Approval, Rule, SavedView, Webhook
from approvals.rules import CompiledRule, RuleSet, glob_covers
from budgets.models import OVERRIDE_TOOL, Budget, BudgetOverride
from console.core.errors import Forbidden, NotFound
from console.core.kept import Kept
from console.directory.access import (
    Viewer,
    _roles,
    acting_principal,
    can,
    capabilities_of,
    decides_every_tool,
    held_in_tenant,
    kept_in_tenant,
    one_in_tenant,
    require_capability,
)
from console.models import ApiKey, Principal
from runs.models import Run


def approval_in_tenant(*, tenant_id: int, approval_id: str) -> None:
    """NotFound unless this tenant holds an approval with this id (the API's 404 check)."""
    held_in_tenant(
        Approval.objects, tenant_id=tenant_id, value=approval_id, noun="approval",
        code="approval_not_found",
    )  # fmt: skip


def approvals_visible_to(*, viewer: Viewer) -> QuerySet:
    if not (can(viewer, "view_runs") or can(viewer, "decide")):
        raise Forbidden("you may not view approvals")
    return Approval.objects.filter(tenant_id=viewer.tenant_id)


def approval_for(*, viewer: Viewer, approval_id: str):
    approval = one_in_tenant(
        Approval.objects.select_related("run"), tenant_id=viewer.tenant_id, value=approval_id,
        noun="approval", code="approval_not_found",
    )  # fmt: skip
    if not (can(viewer, "view_runs") or can(viewer, "decide")):
        raise Forbidden("you may not view approvals")
    return approval


def decide_refusal(viewer: Viewer, approval) -> str | None:
    """Why this viewer may not decide this approval (None: it may). Same tenant assumed.

    A key decides as the principal it is bound to, under that principal's roles.
    """
    if isinstance(viewer, ApiKey) and not viewer.has_scope("decide"):
        return "this API key lacks the 'decide' scope"
    principal = acting_principal(viewer)
    if approval.tool_name == OVERRIDE_TOOL:
        return _override_refusal(principal, approval)
    return _tool_refusal(principal, approval.tool_name) or _self_refusal(principal, approval.run)


def decidable(viewer: Viewer, approvals) -> list:
    """The approvals (of one tenant) this viewer may decide, in their order: exactly those for
    which `decide_refusal` is None, by the same rules, but with the roles' question (capability
    and tool globs) asked once per tool name and the self-approval one once per run, not once
    per call: for the mail of a batch of 500 calls of one run to 50 people, 50 × (distinct tool
    names) glob questions and 50 run checks rather than 25,000 of each."""
    if isinstance(viewer, ApiKey) and not viewer.has_scope("decide"):
        return []
    principal = acting_principal(viewer)
    by_tool: dict[str, str | None] = {}
    by_run: dict[int, str | None] = {}
    chosen = []
    for approval in approvals:
        tool = approval.tool_name
        if tool == OVERRIDE_TOOL:
            refused = _override_refusal(principal, approval)
        else:
            if tool not in by_tool:
                by_tool[tool] = _tool_refusal(principal, tool)
            refused = by_tool[tool]
            if refused is None:  # a principal that may decide the tool (not None)
                if approval.run_id not in by_run:
                    by_run[approval.run_id] = _self_refusal(principal, approval.run)
                refused = by_run[approval.run_id]
        if refused is None:
            chosen.append(approval)
    return chosen


def decidable_q(viewer: Viewer, tool_names=None) -> Q:
    """`decidable` as a filter on approvals of the viewer's tenant (SQL, for counting and
    paging thousands of calls): the same three questions, the roles' one asked once per tool
    name of `tool_names` (the distinct names among the calls being filtered). `tool_names`
    None: the names are not known, which only a viewer who `decides_every_tool` may leave
    them (its roles' answer is yes for every name but an override's). Pending-ness and mirrors
    are the caller's."""
    nothing = Q(pk__in=[])
    if isinstance(viewer, ApiKey) and not viewer.has_scope("decide"):
        return nothing
    principal = acting_principal(viewer)
    if principal is None or not principal.is_active:
        return nothing
    if tool_names is None:
        if not decides_every_tool(principal):
            raise ValueError("the tool names are needed for a viewer who decides some tools")
        calls = ~Q(tool_name=OVERRIDE_TOOL)
        tool_names = {OVERRIDE_TOOL}  # may be among them: ask the overrides' question too
    else:
        tool_names = set(tool_names)
        calls = Q(
            tool_name__in=[
                t for t in tool_names if t != OVERRIDE_TOOL and _tool_refusal(principal, t) is None
            ]
        )
    # The principal's own runs, as a NOT IN of their ids (few, through run_principal_newest):
    # the same answer as `~Q(run__principal_id=...)`, without joining every counted call to
    # its run (the desk's count at 10,000 calls: 8.5 -> 3.0 ms).
    own = ~Q(
        run_id__in=Run.objects.filter(tenant_id=principal.tenant_id, principal=principal).values(
            "id"
        )
    )
    if not viewer.tenant.allow_self_approval:  # _self_refusal
        calls &= own
    if OVERRIDE_TOOL not in tool_names:
        return calls  # no over-budget request among them: nothing asks their budgets
    # _override_refusal: the budget's leads, else manage_budgets holders; never the run's own.
    # A subquery per override call, not a join: the other calls counted never meet the table.
    leads = Budget.leads.through.objects.filter(budget_id=OuterRef("budget_id"))
    named = Exists(leads.filter(principal_id=principal.pk))
    led_by = named | ~Exists(leads) if can(principal, "manage_budgets") else named
    led = Exists(BudgetOverride.objects.filter(led_by, approval_id=OuterRef("pk")))
    overrides = Q(tool_name=OVERRIDE_TOOL) & led & own
    return calls | overrides


def _tool_refusal(principal: Principal | None, tool_name: str) -> str | None:
    """The part of `decide_refusal` that depends on the principal and the tool's name only."""
    if principal is None or not principal.is_active or not can(principal, "decide"):
        return "you may not decide approvals"
    if not can(principal, "decide", tool_name):
        return f"none of your roles may decide the tool '{tool_name}'"
    return None


def tool_decidable(principal: Principal | None, tool_name: str) -> bool:
    """May the principal decide calls of this tool by its roles (`decidable`'s question per
    tool)? An over-budget override is asked per call (the budget's leads): True for an active
    principal, whom some override may name."""
    if tool_name == OVERRIDE_TOOL:
        return principal is not None and principal.is_active
    return _tool_refusal(principal, tool_name) is None


def _self_refusal(principal: Principal, run) -> str | None:
    """The part of `decide_refusal` that depends on the principal and the call's run only."""
    if run.principal_id == principal.pk and not run.tenant.allow_self_approval:
        return "no one decides a call of a run that is for themselves"
    return None


def _override_refusal(principal: Principal | None, approval) -> str | None:
    """An over-budget override is decided by the budget's leads (none: by `manage_budgets`
    holders), never through tool globs, and never by the principal the run is for (even
    where the tenant allows self-approval). An approval named `budget.override` that no
    budget check made is decided by no one (it expires: fail closed)."""
    if principal is None or not principal.is_active:
        return "you may not decide approvals"
    override = getattr(approval, "budget_override", None)
    if override is None:
        return "this call is named like a budget override but no budget check asked for it"
    budget = override.budget
    leads = {lead.pk for lead in budget.leads.all()}
    if leads and principal.pk not in leads:
        return f"only the leads of the budget '{budget.name}' decide its overrides"
    if not leads and not can(principal, "manage_budgets"):
        return f"only holders of manage_budgets decide overrides of the budget '{budget.name}'"
    if approval.run.principal_id == principal.pk:
        return "no one decides an override for a run that is for themselves"
    return None


def slack_decide_refusal(principal: Principal, approval) -> str | None:
    """Why this principal may not decide this approval from Slack (None: it may): every v1
    rule, and one of the roles that let it decide the tool must allow Slack (`slackDecide`).
    Deciding in Slack trusts Slack's sign-in: the tenant turns it on (`slackDecisions`)."""
    reason = decide_refusal(principal, approval)
    if reason:
        return reason
    if approval.run.tenant.slack_decisions != "decide":
        return "deciding from Slack is off for this tenant: open the card in the console"
    granting = [
        role
        for role in _roles(principal)
        if "admin" in role.capabilities
        or (
            "decide" in role.capabilities
            and any(fnmatchcase(approval.tool_name, glob) for glob in role.decide_tools)
        )
    ]
    if not any(role.slack_decide for role in granting):
        return f"your roles do not allow deciding '{approval.tool_name}' from Slack"
    return None


def may_decide(viewer: Viewer, approval) -> None:
    """Forbidden unless the viewer may decide this approval; NotFound for another tenant's."""
    if approval.tenant_id != viewer.tenant_id:
        raise NotFound(f"no approval '{approval.public_id}'", code="approval_not_found")
    reason = decide_refusal(viewer, approval)
    if reason:
        raise Forbidden(reason, code="may_not_decide")


# A decision's read of its approval, compiled once (console/core/kept.py): with its run and
# tenant, and `mirrored`: whether deciding it must look for its mirrors (settle.py).
_FOR_DECIDER = Kept(
    lambda tenant_id, public_id: (
        Approval.objects.with_run()
        .annotate(mirrored=Exists(Approval.objects.filter(mirror_of=OuterRef("pk"))))
        .filter(tenant_id=tenant_id, public_id=public_id)
        .order_by()[:2]  # unique in the tenant: nothing to sort
    )
)


def approval_for_decider(*, viewer: Viewer, approval_id: str):
    """The approval a decider asks for: NotFound outside its tenant, Forbidden if it may not."""
    approval = kept_in_tenant(
        _FOR_DECIDER,
        tenant_id=viewer.tenant_id, value=approval_id, noun="approval", code="approval_not_found",
    )  # fmt: skip
    may_decide(viewer, approval)
    return approval


def rules_of(*, viewer: Viewer) -> QuerySet:
    """The tenant's lasting rules, for a viewer with `manage_rules` (Forbidden otherwise)."""
    require_capability(viewer, "manage_rules")
    return (
        Rule.objects.filter(tenant_id=viewer.tenant_id)
        .select_related("created_by")
        .prefetch_related("editors")
    )


def rule_pattern_refusal(principal: Principal | None, tool_pattern: str) -> str | None:
    """Why this principal may not make or change a rule of this tool pattern (None: it may).
    A rule decides calls (a deny rule as much as an approve rule), so its author must be able
    to decide every tool the pattern can name: `decide`, and one role with `decide` whose
    tool glob covers the whole pattern (approvals.rules.glob_covers: `*` covers any pattern,
    `email.*` covers `email.send` and `email.*`, not `*`); `admin` covers everything."""
    if principal is None or not principal.is_active or not can(principal, "decide"):
        return (
            f"you may not make a rule for the tool pattern '{tool_pattern}': a rule decides "
            "calls, and you may not decide approvals"
        )
    if "admin" in capabilities_of(principal) or any(
        glob_covers(glob, tool_pattern)
        for role in _roles(principal)
        if "decide" in role.capabilities
        for glob in role.decide_tools
    ):
        return None
    return (
        f"you may not make a rule for the tool pattern '{tool_pattern}': none of your roles "
        "may decide every tool it names"
    )


def require_rule_pattern(principal: Principal | None, tool_pattern: str) -> None:
    """Forbidden (403 `forbidden`, naming the pattern) unless rule_pattern_refusal allows."""
    reason = rule_pattern_refusal(principal, tool_pattern)
    if reason:
        raise Forbidden(reason, code="forbidden")


def rule_authors(*, keys) -> dict[int, Principal]:
    """The active principals among these ids (a rule's creator and editors) with their roles
    read, in one query, for asking `rule_author_refusal` of each at decision time."""
    found: dict[int, Principal] = {}
    links = Principal.roles.through.objects.filter(
        principal_id__in=list(keys), principal__is_active=True
    ).select_related("principal", "role")
    for link in links:
        principal = found.setdefault(link.principal_id, link.principal)
        principal.__dict__.setdefault("_gavel_roles", []).append(link.role)
    return found


def rule_author_refusal(principal: Principal | None, tool_name: str) -> str | None:
    """Why a rule's author may not (now) decide calls of this tool (None: it may): exactly
    what would refuse that principal the decision itself (roles, tool globs), four-eyes
    aside (a rule's own check). `principal` None: not an active principal any more."""
    return _tool_refusal(principal, tool_name)


class RuleAuthority:
    """`authority` for RuleSet.decide / explain (one per batch or request; the MCP gateway's
    edge keeps one for GAVEL_MCP_CACHE_SECONDS, gateway/edge.py): why a rule's authors (its
    creator and every editor) may not decide a tool now, or None. Their roles are read on
    the first question (one query for every author of the tenant's rules), and each (rule,
    tool) is answered once."""

    def __init__(self, ruleset: RuleSet):
        self._keys = ruleset.author_keys
        self._authors = None
        self._answers: dict[tuple[int, str], str | None] = {}

    def __call__(self, rule: CompiledRule, tool_name: str) -> str | None:
        asked = (id(rule), tool_name)
        if asked not in self._answers:
            self._answers[asked] = self._refusal(rule, tool_name)
        return self._answers[asked]

    def _refusal(self, rule: CompiledRule, tool_name: str) -> str | None:
        if not rule.authors:
            return "createdBy: no principal stands behind this rule"
        if self._authors is None:
            self._authors = rule_authors(keys=self._keys)
        for key, wire_id in rule.authors.items():
            if rule_author_refusal(self._authors.get(key), tool_name):
                who = f"'{wire_id}'" if wire_id else "an author"
                return (
                    f"authority: {who}, who made or changed this rule, may not decide "
                    f"'{tool_name}' now"
                )
        return None


def rule_in_tenant(*, tenant_id: int, rule_id: str) -> None:
    """NotFound unless this tenant holds a rule with this id (the API's 404 check)."""
    held_in_tenant(
        Rule.objects, tenant_id=tenant_id, value=rule_id, noun="rule", code="rule_not_found"
    )


def rule_for(*, viewer: Viewer, rule_id: str) -> Rule:
    """One rule of the viewer's tenant: NotFound outside it, Forbidden without manage_rules."""
    rule = one_in_tenant(
        Rule.objects.select_related("created_by", "tenant"), tenant_id=viewer.tenant_id,
        value=rule_id, noun="rule", code="rule_not_found",
    )  # fmt: skip
    require_capability(viewer, "manage_rules")
    return rule


def webhooks_of(*, viewer: Viewer) -> QuerySet:
    """The tenant's registered (not deleted) webhooks, for an admin."""
    require_capability(viewer, "admin")
    return Webhook.objects.filter(tenant_id=viewer.tenant_id, is_active=True)


def webhook_in_tenant(*, tenant_id: int, webhook_id: str) -> None:
    """NotFound unless this tenant holds a live webhook with this id (the API's 404 check)."""
    held_in_tenant(
        Webhook.objects.filter(is_active=True), tenant_id=tenant_id, value=webhook_id,
        noun="webhook", code="webhook_not_found",
    )  # fmt: skip


def webhook_for(*, viewer: Viewer, webhook_id: str) -> Webhook:
    """One live webhook of the viewer's tenant (a deleted one is gone): NotFound outside it,
    Forbidden without admin."""
    webhook = one_in_tenant(
        Webhook.objects.select_related("tenant").filter(is_active=True),
        tenant_id=viewer.tenant_id, value=webhook_id, noun="webhook", code="webhook_not_found",
    )  # fmt: skip
    require_capability(viewer, "admin")
    return webhook


def saved_views_of(*, viewer: Viewer) -> QuerySet:
    """The desk's views this viewer saved (its acting principal's, in its tenant): none for a
    runtime's key, which acts as no one. Forbidden without view_runs or decide (the desk's)."""
    approvals_visible_to(viewer=viewer)
    principal = acting_principal(viewer)
    if principal is None:
        return SavedView.objects.none()
    return SavedView.objects.filter(tenant_id=viewer.tenant_id, principal=principal)


def saved_view_for(*, viewer: Viewer, view_id: str) -> SavedView:
    """One of this viewer's saved views: another principal's or another tenant's is NotFound,
    like a missing one."""
    mine = saved_views_of(viewer=viewer)  # 403 first: a view is its principal's own, not a
    # tenant's object another principal could be told exists
    return one_in_tenant(
        mine, tenant_id=viewer.tenant_id, value=view_id, noun="saved view",
        code="saved_view_not_found",
    )  # fmt: skip
