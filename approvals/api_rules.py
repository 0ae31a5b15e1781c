"""Lasting decision rules over the wire (contract v1.1, `manage` scope and the `manage_rules`
capability of the key's principal). Handlers only translate."""

from ninja import Query, Router

from approvals import access as approvals_access
from approvals import selectors_rules as selectors
from approvals.schemas_rules import (
    ExplainIn,
    ExplainOut,
    PreviewOut,
    PreviewQuery,
    RuleIn,
    RuleListOut,
    RuleListQuery,
    RuleOut,
    RulePatchIn,
    SuggestionsOut,
    rule_fields,
    rule_resource,
    rule_spec_unsaved,
)
from approvals.services.rules import rule_create, rule_deactivate, rule_update
from console.core.wire import errors
from console.web.auth import PrincipalKeyAuth

router = Router(tags=["rules"])


# A manage key whose principal holds manage_rules; checked before the path's rule is looked up
# and before the body is parsed (the capability does not depend on the object).
rules_auth = PrincipalKeyAuth("manage", capability="manage_rules")


@router.get(
    "/rules",
    auth=rules_auth,
    response={200: RuleListOut, **errors(422)},
    by_alias=True,
    summary="The tenant's rules, newest first (deactivated ones too; keyset pagination)",
)
def rules_index(request, query: Query[RuleListQuery]):
    return selectors.rules_list(viewer=request.auth, limit=query.limit, cursor=query.cursor)


@router.post(
    "/rules",
    auth=rules_auth,
    response={201: RuleOut, **errors(413, 422)},
    by_alias=True,
    summary="Make a lasting rule (it decides matching calls requested from now on)",
)
def rules_create(request, payload: RuleIn):
    key = request.auth
    rule = rule_create(
        tenant=key.tenant, fields=rule_fields(payload), principal=key.principal, key=key
    )
    return 201, rule_resource(rule)


@router.get(
    "/rules/suggestions",
    auth=rules_auth,
    response={200: SuggestionsOut},
    by_alias=True,
    summary="Rules the last 30 days of decisions suggest (a tool and agent decided alike)",
)
def rules_suggestions(request):
    return {"items": selectors.rule_suggestions(viewer=request.auth)}


@router.post(
    "/rules/explain",
    auth=rules_auth,
    response={200: ExplainOut, **errors(404, 413, 422)},
    by_alias=True,
    summary="Which rule would decide this call, and why each other one does not",
)
def rules_explain(request, payload: ExplainIn):
    call = selectors.explain_call(viewer=request.auth, **payload.model_dump())
    return selectors.rule_explain(viewer=request.auth, call=call)


@router.post(
    "/rules/preview",
    auth=rules_auth,
    response={200: PreviewOut, **errors(413, 422)},
    by_alias=True,
    summary="The calls of the last `days` days an unsaved rule would have decided",
)
def rules_preview_unsaved(request, payload: RuleIn, query: Query[PreviewQuery]):
    key = request.auth
    spec = rule_spec_unsaved(fields=rule_fields(payload), creator=key.principal)
    return selectors.rule_preview(viewer=key, spec=spec, days=query.days)


@router.get(
    "/rules/{rule_id}",
    auth=rules_auth,
    response={200: RuleOut, **errors(404)},
    by_alias=True,
    summary="One rule",
)
def rules_get(request, rule_id: str):
    return rule_resource(approvals_access.rule_for(viewer=request.auth, rule_id=rule_id))


@router.patch(
    "/rules/{rule_id}",
    auth=rules_auth,
    response={200: RuleOut, **errors(404, 413, 422)},
    by_alias=True,
    summary="Change a rule (calls decided already are never touched)",
)
def rules_patch(request, rule_id: str, payload: RulePatchIn):
    key = request.auth
    rule = approvals_access.rule_for(viewer=key, rule_id=rule_id)
    rule = rule_update(rule=rule, fields=rule_fields(payload), principal=key.principal, key=key)
    return rule_resource(rule)


@router.delete(
    "/rules/{rule_id}",
    auth=rules_auth,
    response={204: None, **errors(404)},
    summary="Deactivate a rule (it stays listed, with active false)",
)
def rules_delete(request, rule_id: str):
    key = request.auth
    rule_deactivate(
        rule=approvals_access.rule_for(viewer=key, rule_id=rule_id),
        principal=key.principal,
        key=key,
    )
    return 204, None


@router.get(
    "/rules/{rule_id}/preview",
    auth=rules_auth,
    response={200: PreviewOut, **errors(404, 422)},
    by_alias=True,
    summary="The calls of the last `days` days this rule would have decided",
)
def rules_preview(request, rule_id: str, query: Query[PreviewQuery]):
    rule = approvals_access.rule_for(viewer=request.auth, rule_id=rule_id)
    return selectors.rule_preview(viewer=request.auth, spec=rule.spec(), days=query.days)
