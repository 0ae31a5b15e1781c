"""Lasting decision rules, the writes: saving rules (audited, versioned) and deciding calls by
them the moment they are requested.

Each process keeps every tenant's active rules compiled (approvals/rules/) together with the
tenant's rules version (`RuleVersion`), which every rule write bumps in its own transaction. A
batch reads that version once, whatever the number of rules or calls (on the events path it
comes with the run's locking query itself; elsewhere it is one small query); only when it moved
are the rules read and compiled again. So a rule saved through one process applies to the next
call ingested through any other, and a batch costs no query per rule and none per call that no
rule decides. A call a rule decides is inserted decided by the one writer
(approvals/services/settle.py, `approvals_insert`) with the rule as its actor; the rules' `hits`
grow in one atomic UPDATE per batch.

A rule is its authors': the principal who made it and every principal who changed it since
(`Rule.editors`). Saving needs the right to decide every tool its pattern names (console.access
`require_rule_pattern`, a 403 after the body's 422s); and a rule decides a call only when none
of its authors is the run's principal (four-eyes, unless the tenant allows self-approval) and
each of them may, now, decide the call's tool (roles change without a rule write, so this is
asked at decision time: the authors' roles are read in one query per batch, and only in a
batch where some rule matches a call). A rule whose authors lost the right leaves the call to
people.
"""

from __future__ import annotations

from collections import Counter

from django.core.exceptions import SynchronousOnlyOperation
from django.db import IntegrityError, transaction
from django.db.models import Case, F, PositiveBigIntegerField, Value, When
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from approvals import access as approvals_access
from approvals.models import Approval, ApprovalStatus, Rule, RuleVersion
from approvals.rules import Call, RuleSet, RuleSpec
from approvals.schemas_rules import DEFAULTS, rule_fields_checked, rule_wire
from console.directory.services import audit

# wire field (snake_case) -> the model's field
FIELDS = {
    "name": "name",
    "effect": "effect",
    "tool_pattern": "tool_pattern",
    "agent_pattern": "agent_pattern",
    "principal_pattern": "principal_pattern",
    "conversation_id": "conversation_external_id",
    "run_id": "run_external_id",
    "conditions": "conditions",
    "message": "message",
    "expires_at": "expires_at",
    "active": "active",
    "examples": "examples",
}


# ---- writes ----------------------------------------------------------------------------------


def _rules_changed(*, tenant_id: int) -> None:
    """Bump the tenant's rules version (in the writing transaction): every process compiles
    the tenant's rules again on its next batch."""
    if RuleVersion.objects.filter(tenant_id=tenant_id).update(version=F("version") + 1):
        return
    try:
        with transaction.atomic():
            RuleVersion.objects.create(tenant_id=tenant_id, version=1)
    except IntegrityError:  # a concurrent first write made the row
        RuleVersion.objects.filter(tenant_id=tenant_id).update(version=F("version") + 1)


def _audit(rule: Rule, *, action: str, before, principal, key) -> None:
    audit(
        tenant=rule.tenant,
        action=action,
        object_type="rule",
        object_id=rule.public_id,
        principal=principal,
        key=key,
        data={"before": before, "after": rule_wire(rule)},
    )


@transaction.atomic
def rule_create(*, tenant, fields: dict, principal, key=None) -> Rule:
    """A new rule made by `principal` (through `key`, a manage key, when not in the console)."""
    fields = rule_fields_checked({**DEFAULTS, **fields})
    approvals_access.require_rule_pattern(principal, fields["tool_pattern"])
    rule = Rule(tenant=tenant, created_by=principal)
    for name, attname in FIELDS.items():
        setattr(rule, attname, fields[name])
    rule.created_at = rule.updated_at = timezone.now()
    rule.save()
    _rules_changed(tenant_id=tenant.pk)
    _audit(rule, action="rule.created", before=None, principal=principal, key=key)
    return rule


def _locked(rule: Rule) -> Rule:
    return (
        Rule.objects.select_for_update(of=("self",))
        .select_related("created_by", "tenant")
        .get(pk=rule.pk)
    )


@transaction.atomic
def rule_update(*, rule: Rule, fields: dict, principal, key=None) -> Rule:
    """Change some of a rule's fields; the whole rule is checked again (examples included).
    The changer must be able to decide every tool of the (new) pattern, and becomes one of
    the rule's authors; only switching it off (`active: false`, like DELETE) needs neither.
    Calls decided already are never touched: a rule decides only calls requested after."""
    rule = _locked(rule)
    before = rule_wire(rule)
    current = {name: getattr(rule, attname) for name, attname in FIELDS.items()}
    merged = rule_fields_checked({**current, **fields})
    changed = [FIELDS[n] for n in FIELDS if merged[n] != current[n]]
    if not changed:
        return rule
    if changed != ["active"] or merged["active"]:
        approvals_access.require_rule_pattern(principal, merged["tool_pattern"])
        if principal is not None and principal.pk != rule.created_by_id:
            rule.editors.add(principal)
    for name, attname in FIELDS.items():
        setattr(rule, attname, merged[name])
    rule.updated_at = timezone.now()
    rule.save(update_fields=[*changed, "updated_at"])  # never hits: they grow concurrently
    _rules_changed(tenant_id=rule.tenant_id)
    _audit(rule, action="rule.updated", before=before, principal=principal, key=key)
    return rule


@transaction.atomic
def rule_deactivate(*, rule: Rule, principal, key=None) -> Rule:
    """DELETE: the rule stops deciding; it stays, listed with active false."""
    rule = _locked(rule)
    if not rule.active:
        return rule
    before = rule_wire(rule)
    rule.active = False
    rule.updated_at = timezone.now()
    rule.save(update_fields=["active", "updated_at"])
    _rules_changed(tenant_id=rule.tenant_id)
    _audit(rule, action="rule.deleted", before=before, principal=principal, key=key)
    return rule


# ---- deciding at request time ------------------------------------------------------------------

# tenant id -> (rules version, its active rules compiled). Per process; a version read with
# each batch says when an entry is stale.
_compiled: dict[int, tuple[int, RuleSet]] = {}


def rules_version(*, tenant_id: int) -> int:
    """The tenant's rules version (0: it never had a rule). One small query."""
    return (
        RuleVersion.objects.filter(tenant_id=tenant_id).values_list("version", flat=True).first()
        or 0
    )


def ruleset_for(*, tenant, version: int) -> RuleSet:
    """The tenant's active rules compiled, from this process's cache while `version` holds.
    The rules are read after the version, so an entry is never older than its version says."""
    cached = _compiled.get(tenant.pk)
    if cached is not None and cached[0] == version:
        return cached[1]
    rules = (
        Rule.objects.filter(tenant_id=tenant.pk, active=True)
        .select_related("created_by")
        .prefetch_related("editors")
        .order_by("created_at", "id")
    )
    ruleset = RuleSet(
        [r.spec() for r in rules if r.expires_at is None or r.expires_at > timezone.now()],
        allow_self_approval=tenant.allow_self_approval,
    )
    _compiled[tenant.pk] = (version, ruleset)
    return ruleset


def rules_cache_clear() -> None:
    """Forget every compiled rule set (tests)."""
    _compiled.clear()


def _facts(run, ruleset: RuleSet) -> dict:
    """The run's side of a call, read only when some rule looks at it."""
    principal_id = None
    if ruleset.needs_principal_id and run.principal_id:
        principal_id = run.principal.external_id
    conversation_id = None
    if ruleset.needs_conversation and run.conversation_id:
        conversation_id = run.conversation.external_id
    return {
        "agent_id": run.current_agent_id,
        "principal_id": principal_id,
        "principal_key": run.principal_id,
        "run_id": run.external_id,
        "conversation_id": conversation_id,
    }


def rule_approving(*, run, tool_name: str, arguments, authority_of=None) -> RuleSpec | None:
    """The lasting rule that would approve this call of `run` now, or None (a deny rule, no
    rule, or one whose authors may not): the MCP gateway asks before it sends a call upstream
    that no person needs to see first (gateway/flow.py). Nothing is written. One small query
    (the rules version), and the authors' roles only when a rule matches. `authority_of`:
    the caller's RuleAuthority for a rule set (one it keeps a while), else a new one."""
    version = rules_version(tenant_id=run.tenant_id)
    if not version:
        return None
    ruleset = ruleset_for(tenant=run.tenant, version=version)
    return _approving(run, ruleset, tool_name, arguments, authority_of)


def _approving(run, ruleset: RuleSet, tool_name: str, arguments, authority_of) -> RuleSpec | None:
    """The rule of `ruleset` that approves this call now, or None."""
    if not len(ruleset):
        return None
    call = Call(tool_name=tool_name, arguments=arguments, **_facts(run, ruleset))
    outcome = ruleset.decide(
        call,
        now=timezone.now(),
        allow_self_approval=run.tenant.allow_self_approval,
        authority=(authority_of or approvals_access.RuleAuthority)(ruleset),
    )
    if outcome.decision != "approve" or outcome.rule is None:
        return None
    return outcome.rule.spec


def rule_approving_known(
    *, run, tool_name: str, arguments, authority_of=None
) -> tuple[RuleSpec, int] | None:
    """`rule_approving` with no database trip, from the rule set this process compiled last
    for the tenant: (the approving rule, the rules version it was compiled at), or None —
    ask `rule_approving` (no compiled rules here, a rule that does not approve, or a fact or
    an author's roles not at hand: one that would need a query, which an event loop may not
    make). The caller's write must hold only while that version is the tenant's (the MCP
    gateway's INSERT checks it in the same statement, gateway/records.py)."""
    cached = _compiled.get(run.tenant_id)
    if cached is None:
        return None
    version, ruleset = cached
    try:
        spec = _approving(run, ruleset, tool_name, arguments, authority_of)
    except SynchronousOnlyOperation:  # something of the run or the authors is not loaded
        return None
    return None if spec is None else (spec, version)


def rule_hits_add(*, counts: Counter, now=None) -> None:
    """hits = hits + n for each rule, in one UPDATE (exact under any concurrency; the rows are
    locked in id order, so two batches never wait on each other in a circle). Call it at the
    end of the batch's transaction."""
    if not counts:
        return
    now = now or timezone.now()
    whens = [When(pk=pk, then=Value(n)) for pk, n in sorted(counts.items())]
    Rule.objects.filter(pk__in=sorted(counts)).update(
        hits=F("hits") + Case(*whens, default=Value(0), output_field=PositiveBigIntegerField()),
        last_hit_at=Greatest(Coalesce(F("last_hit_at"), Value(now)), Value(now)),
    )


def approvals_rule_decisions(*, run, approvals: list[Approval], hits: Counter | None = None):
    """What the tenant's lasting rules decide of these new approvals (not yet written: their
    requesting transaction inserts them decided, approvals/services/settle.approvals_insert):
    row index -> (status, message, arguments, rule). A deny rule's message (else the call's
    rejection message) is what the model reads; an approval runs the requested arguments.
    Undecided calls cost nothing here. The rules' hits go into `hits` (the caller writes
    them at the end of its batch), else are written now."""
    if hasattr(run, "rules_version"):  # read with the run's lock (console.access.run_locked)
        version = run.rules_version or 0
    else:
        version = rules_version(tenant_id=run.tenant_id)
    if not version:
        return {}
    tenant = run.tenant
    ruleset = ruleset_for(tenant=tenant, version=version)
    if not len(ruleset):
        return {}
    facts, now = _facts(run, ruleset), timezone.now()
    allow = tenant.allow_self_approval
    authority = _authority_of_unit(run, ruleset)
    decisions, counted = {}, Counter()
    for index, approval in enumerate(approvals):
        call = Call(tool_name=approval.tool_name, arguments=approval.arguments, **facts)
        outcome = ruleset.decide(call, now=now, allow_self_approval=allow, authority=authority)
        if outcome.rule is not None and approval.expires_at > now:
            decisions[index] = _decision(approval, outcome.rule.spec)
            counted[outcome.rule.spec.source.pk] += 1
    if hits is not None:
        hits.update(counted)
    else:
        rule_hits_add(counts=counted, now=now)
    return decisions


def _authority_of_unit(run, ruleset: RuleSet):
    """One RuleAuthority per unit of work (RuleAuthority's own rule: one per batch): an
    ingest batch's held calls, each requested on its own, share their run's instance, so the
    rules' authors' roles are read once for the batch, not once per call."""
    kept = run.__dict__.get("_gavel_rule_authority")
    if kept is None or kept[0] is not ruleset:
        kept = (ruleset, approvals_access.RuleAuthority(ruleset))
        run.__dict__["_gavel_rule_authority"] = kept
    return kept[1]


def _decision(approval: Approval, spec: RuleSpec) -> tuple:
    deny = spec.effect == "deny"
    status = ApprovalStatus.DENIED if deny else ApprovalStatus.APPROVED
    message = (spec.message or approval.rejection_message) if deny else spec.message
    arguments = None if deny else approval.arguments
    return status, message, arguments, spec.source
