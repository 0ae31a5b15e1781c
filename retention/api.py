"""Retention and exports over the wire (`manage` scope, `admin`; or an admin's signed-in
browser session): GET|PATCH /retention, GET /runs/{runId}/export, GET /export. Handlers only
translate; retention.policy and retention.export decide."""

from typing import Annotated

from django.http import StreamingHttpResponse
from ninja import Field, Router
from pydantic import StrictInt

from console.audit.checkpoints import audit_checkpoint
from console.core.wire import CamelSchema, errors
from console.directory import signin
from console.web.auth import CapableSession, PrincipalKeyAuth
from retention import export, policy

router = Router(tags=["retention and export"])

ADMIN = [PrincipalKeyAuth("manage", "admin"), CapableSession("admin")]
Days = Annotated[StrictInt, Field(ge=policy.MIN_DAYS, le=policy.MAX_DAYS)]


class RetentionOut(CamelSchema):
    run_days: int | None
    sent_mail_days: int | None
    webhook_delivery_days: int | None
    read_notification_days: int | None
    audit_days: int | None


class RetentionPatch(CamelSchema):
    """Any of the days (1..3650); null: keep forever."""

    model_config = {**CamelSchema.model_config, "extra": "forbid"}

    run_days: Days | None = None
    sent_mail_days: Days | None = None
    webhook_delivery_days: Days | None = None
    read_notification_days: Days | None = None
    audit_days: Days | None = None

    def changes(self) -> dict:
        dumped = self.model_dump()
        return {name: dumped[name] for name in self.model_fields_set}


@router.get(
    "/retention",
    auth=ADMIN,
    response={200: RetentionOut, **errors()},
    by_alias=True,
    summary="The tenant's retention policy: days each kind of data is kept (null: forever)",
)
def retention_get(request):
    return policy.retention_settings(request.auth.tenant)


@router.patch(
    "/retention",
    auth=ADMIN,
    response={200: RetentionOut, **errors(413, 422)},
    by_alias=True,
    summary="Change any of the retention days (admin; a browser needs a recent password)",
)
def retention_patch(request, payload: RetentionPatch):
    signin.require_recent_auth_api(request)
    tenant = policy.retention_update(viewer=request.auth, fields=payload.changes())
    return policy.retention_settings(tenant)


@router.get(
    "/runs/{run_id}/export",
    auth=ADMIN,
    response={200: dict, **errors(404)},
    summary="One run as JSON: its RunState, approvals, decisions and audit entries (admin)",
)
def run_export(request, run_id: str):
    audit_checkpoint(tenant=request.auth.tenant, by="export")
    return export.run_export_for(viewer=request.auth, run_id=run_id)


@router.get(
    "/export",
    auth=ADMIN,
    response={200: None, **errors()},
    summary="The whole tenant as JSON Lines, streamed: settings, principals, runs, audit "
    "entries, then an `end` line with the counts (admin)",
    openapi_extra={
        "responses": {
            200: {
                "description": "one JSON object per line",
                "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
            }
        }
    },
)
def tenant_export(request):
    lines = export.tenant_export_lines(viewer=request.auth)
    audit_checkpoint(tenant=request.auth.tenant, by="export")
    response = StreamingHttpResponse(lines, content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="tenant.jsonl"'
    return response
