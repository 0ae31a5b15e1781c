"""A tenant's single sign-on settings over the wire (`admin`: a `manage` key acting as its
principal, or a signed-in admin's browser session). Handlers only translate."""

from ninja import Router

from console.core.wire import errors
from console.directory.schemas.oidc import OidcOut, OidcPatch
from console.directory.services import sso as services
from console.directory.signin import require_recent_auth_api
from console.web.auth import CapableSession, PrincipalKeyAuth

router = Router(tags=["single sign-on"])

ADMIN = [PrincipalKeyAuth("manage", "admin"), CapableSession("admin")]


def _out(request, config) -> dict:
    wire = services.oidc_wire(config)
    return {**wire, "redirectUri": services.redirect_uri(request.auth.tenant, request)}


@router.get(
    "/tenant/oidc",
    auth=ADMIN,
    response={200: OidcOut, **errors()},
    by_alias=True,
    summary="The tenant's OpenID Connect settings (issuer null: single sign-on is off)",
)
def oidc_get(request):
    return _out(request, services.oidc_of(request.auth.tenant))


@router.patch(
    "/tenant/oidc",
    auth=ADMIN,
    response={200: OidcOut, **errors(409, 413, 422)},
    by_alias=True,
    summary="Set or change the OpenID Connect settings (the issuer's discovery is read)",
)
def oidc_patch(request, payload: OidcPatch):
    require_recent_auth_api(request)
    config = services.oidc_update(
        tenant=request.auth.tenant, fields=payload.changes(), viewer=request.auth
    )
    return _out(request, config)


@router.delete(
    "/tenant/oidc",
    auth=ADMIN,
    response={204: None},
    summary="Turn single sign-on off",
)
def oidc_delete(request):
    require_recent_auth_api(request)
    services.oidc_delete(tenant=request.auth.tenant, viewer=request.auth)
    return 204, None
