"""The management API for API keys and the tenant's settings (`manage` scope, `admin`; or a
signed-in browser session of an admin). Handlers only translate; the services
(console/services/keys.py, console/services/tenant.py) decide and audit."""

from ninja import Query, Router

from console.core.wire import errors
from console.directory import access, signin
from console.directory.schemas import keys as s
from console.directory.services import keys as key_services
from console.directory.services import tenant as tenant_services
from console.web.auth import CapableSession, PrincipalKeyAuth

router = Router(tags=["keys and tenant settings"])

# A manage key acting as an admin, or an admin's signed-in session (checked before the body).
ADMIN = [PrincipalKeyAuth("manage", "admin"), CapableSession("admin")]


@router.get(
    "/keys",
    auth=ADMIN,
    response={200: s.KeyListOut, **errors(422)},
    by_alias=True,
    summary="The tenant's API keys, newest first (revoked and expired ones too; no secrets)",
)
def keys_index(request, query: Query[s.ListQuery]):
    page = key_services.api_keys_page(viewer=request.auth, **query.model_dump())
    items = [key_services.api_key_resource(k) for k in page["items"]]
    return {"items": items, "next_cursor": page["next_cursor"]}


@router.post(
    "/keys",
    auth=ADMIN,
    response={201: s.KeyCreatedOut, **errors(413, 422)},
    by_alias=True,
    summary="Create an API key (admin; a browser needs a recent password); its secret is "
    "answered this once (only its hash is kept)",
)
def keys_create(request, payload: s.KeyIn):
    signin.require_recent_auth_api(request)
    key, secret = key_services.api_key_issue(viewer=request.auth, **payload.model_dump())
    return 201, {"key": key_services.api_key_resource(key), "secret": secret}


@router.delete(
    "/keys/{key_id}",
    auth=ADMIN,
    response={204: None, **errors(404)},
    summary="Revoke an API key: the next request with it is 401",
)
def keys_revoke(request, key_id: str):
    key = access.key_for(viewer=request.auth, key_id=key_id)
    key_services.api_key_revoke(key=key, viewer=request.auth)
    return 204, None


@router.get(
    "/tenant",
    auth=ADMIN,
    response={200: s.TenantOut},
    by_alias=True,
    summary="The tenant's settings (the Slack signing secret only as slackSigningSecretSet)",
)
def tenant_get(request):
    access.require_capability(request.auth, "admin")
    return _tenant_out(request.auth.tenant)


@router.patch(
    "/tenant",
    auth=ADMIN,
    response={200: s.TenantOut, **errors(413, 422)},
    by_alias=True,
    summary="Change any of the tenant's settings (admin; a browser needs a recent password)",
)
def tenant_patch(request, payload: s.TenantPatch):
    signin.require_recent_auth_api(request)
    tenant = tenant_services.tenant_update(viewer=request.auth, fields=payload.changes())
    return _tenant_out(tenant)


def _tenant_out(tenant) -> dict:
    return tenant_services.tenant_settings(tenant)  # already the wire form
