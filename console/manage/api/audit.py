"""The audit log over the wire (`manage` scope, `admin`): list, CSV/JSONL export, verify.
A `manage` key acting as its principal, or a signed-in browser session; handlers translate."""

from django.http import StreamingHttpResponse
from ninja import Query, Router

from console.audit import schemas as s
from console.audit import selectors
from console.audit.checkpoints import audit_checkpoint
from console.audit.log import audit_verify
from console.core.wire import errors
from console.web.auth import CapableSession, PrincipalKeyAuth

router = Router(tags=["audit log"])

ADMIN = [PrincipalKeyAuth("manage", "admin"), CapableSession("admin")]
EXPORTS = {
    "csv": ("text/csv; charset=utf-8", selectors.audit_csv_lines),
    "jsonl": ("application/x-ndjson; charset=utf-8", selectors.audit_jsonl_lines),
}


@router.get(
    "/audit",
    auth=ADMIN,
    response={200: s.AuditListOut, **errors(422)},
    by_alias=True,
    summary="The tenant's audit log, newest first, keyset pages "
    "(`format=csv|jsonl`: every matching entry, streamed)",
    openapi_extra={
        "responses": {
            200: {
                "description": "a page (JSON), or every matching entry with format=csv|jsonl",
                "content": {
                    "text/csv": {"schema": {"type": "string"}},
                    "application/x-ndjson": {"schema": {"type": "string"}},
                },
            }
        }
    },
)
def audit_index(request, query: Query[s.AuditQuery]):
    filters = selectors.audit_query_check(query, tenant=request.auth.tenant)
    export = EXPORTS.get(filters.pop("format"))
    if export is None:
        return selectors.audit_list(tenant=request.auth.tenant, filters=filters)
    content_type, lines = export
    audit_checkpoint(tenant=request.auth.tenant, by="export")  # the head, anchored in the log
    response = StreamingHttpResponse(
        lines(tenant=request.auth.tenant, filters=filters), content_type=content_type
    )
    extension = "csv" if content_type.startswith("text/csv") else "jsonl"
    response["Content-Disposition"] = f'attachment; filename="audit.{extension}"'
    return response


@router.get(
    "/audit/verify",
    auth=ADMIN,
    response={200: s.AuditVerifyOut, **errors()},
    by_alias=True,
    summary="Check the tenant's hash chain: every entry's hash, its link, none missing, "
    "none inserted, against the signed checkpoints; an intact head gets a new checkpoint",
)
def audit_verify_chain(request):
    return audit_verify(tenant=request.auth.tenant)
