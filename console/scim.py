"""SCIM 2.0 (RFC 7643/7644) at /scim/v2/: Users (principals) and Groups (teams) of the key's
tenant, and the discovery endpoints (ServiceProviderConfig, ResourceTypes, Schemas).

Authenticated by a key with the `scim` scope (bound to no principal): no key or a bad one is
401, a key without the scope 403, each in SCIM's error shape
(`urn:ietf:params:scim:api:messages:2.0:Error`). Another tenant's user or group is a 404 like
a missing one. Resources, list responses, errors and the filter grammar are scim2-models';
this module only translates HTTP to the selectors (and, for changes, the directory's
services).
"""

from __future__ import annotations

import json
from functools import wraps

from django.http import HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from pydantic import ValidationError as PydanticValidationError
from scim2_models import (
    AuthenticationScheme,
    Bulk,
    ChangePassword,
    Context,
    ETag,
    Filter,
    Group,
    ListResponse,
    Patch,
    PatchOp,
    ResourceType,
    ScimFilter,
    ServiceProviderConfig,
    Sort,
    User,
)
from scim2_models import Error as ScimError
from scim2_models.exceptions import (
    InvalidFilterException,
    InvalidSyntaxException,
    InvalidValueException,
    NotFoundException,
    SCIMException,
)

from console import selectors_scim as selectors
from console.auth import KeyAuth
from console.errors import Conflict, GavelError, Invalid
from console.models import Principal, Team
from console.services import scim as services

CONTENT_TYPE = "application/scim+json"
MAX_RESULTS = 200  # a page holds at most this many resources (count is capped to it)
DEFAULT_COUNT = 100
RESOURCES = {"User": User, "Group": Group}
ENDPOINTS = {"User": "/Users", "Group": "/Groups"}
_auth = KeyAuth("scim")


def _json(body: dict, status: int = 200) -> HttpResponse:
    return HttpResponse(json.dumps(body), status=status, content_type=CONTENT_TYPE)


def _error(status: int, detail: str, scim_type: str | None = None, headers=None):
    error = ScimError(status=status, detail=detail, scim_type=scim_type)
    response = _json(error.model_dump(), status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _base(request) -> str:
    return request.build_absolute_uri("/").rstrip("/")


def scim_view(view):
    """The key (401/403), then the view; every error answered in SCIM's shape."""

    @csrf_exempt
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        try:
            key = _auth.authenticate(request, token.strip()) if scheme == "Bearer" else None
            if key is None:
                response = _error(401, "a valid key with the 'scim' scope is required")
                response["WWW-Authenticate"] = 'Bearer realm="scim"'
                return response
            request.scim_key = key
            return view(request, *args, **kwargs)
        except SCIMException as error:
            return _json(error.to_error().model_dump(), status=error.status)
        except Conflict as error:
            scim_type = "uniqueness" if error.code in ("principal_exists", "team_exists") else None
            return _error(409, error.message, scim_type)
        except Invalid as error:
            return _error(400, error.message, "invalidValue")
        except GavelError as error:
            retry = getattr(error, "retry_after", None)
            return _error(
                error.status, error.message, headers={"Retry-After": str(retry)} if retry else None
            )

    return wrapped


def _dump(resource) -> dict:
    return resource.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE)


def _page(request, resources: list) -> HttpResponse:
    """RFC 7644 3.4.2.4: startIndex is 1-based (below 1 means 1), count caps the page (below
    0 means 0); totalResults counts every match."""
    start = _int(request.GET.get("startIndex"), 1, "startIndex")
    count = _int(request.GET.get("count"), DEFAULT_COUNT, "count")
    start, count = max(start, 1), min(max(count, 0), MAX_RESULTS)
    page = resources[start - 1 : start - 1 + count]
    listing = ListResponse[User | Group](
        total_results=len(resources), start_index=start, items_per_page=len(page), resources=page
    )
    return _json(listing.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE))


def _int(raw: str | None, default: int, name: str) -> int:
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidFilterException(detail=f"{name} must be an integer") from None


def _filter(request, model):
    raw = request.GET.get("filter")
    if not raw:
        return None
    try:
        return ScimFilter[model](raw)
    except SCIMException:
        raise
    except (ValueError, TypeError) as error:
        raise InvalidFilterException(detail=f"the filter is not valid: {error}") from None


def _get_only(request) -> None:
    if request.method != "GET":
        raise MethodNotAllowed(detail=f"{request.method} is not allowed here")


class MethodNotAllowed(SCIMException):
    status = 405


def _body(request, model, ctx):
    try:
        raw = json.loads(request.body or b"{}")
    except ValueError:
        raise InvalidSyntaxException(detail="the body is not JSON") from None
    if not isinstance(raw, dict):
        raise InvalidSyntaxException(detail="the body must be a JSON object")
    try:
        return model.model_validate(raw, scim_ctx=ctx)
    except PydanticValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidValueException(detail=f"{where}: {first['msg']}") from None


def _patched(request, resource, model):
    """The resource as it is now, with the request's PatchOp applied (scim2-models)."""
    patch = _body(request, PatchOp[model], Context.RESOURCE_PATCH_REQUEST)
    try:
        patch.patch(resource)
    except SCIMException:
        raise
    except (ValueError, TypeError) as error:
        raise InvalidValueException(detail=str(error)) from None
    return resource


def _created(resource) -> HttpResponse:
    response = _json(_dump(resource), status=201)
    response["Location"] = resource.meta.location
    return response


# --- discovery ---


def _service_provider_config(base: str) -> ServiceProviderConfig:
    return ServiceProviderConfig(
        documentation_uri=None,
        patch=Patch(supported=True),
        bulk=Bulk(supported=False, max_operations=0, max_payload_size=0),
        filter=Filter(supported=True, max_results=MAX_RESULTS),
        change_password=ChangePassword(supported=False),
        sort=Sort(supported=False),
        etag=ETag(supported=False),
        authentication_schemes=[
            AuthenticationScheme(
                type="oauthbearertoken",
                name="Gavel API key",
                description="Authorization: Bearer <a key with the scim scope>",
                primary=True,
            )
        ],
    )


@scim_view
def service_provider_config(request):
    _get_only(request)
    config = _service_provider_config(_base(request))
    config.meta = None
    return _json(_dump(config))


def _resource_types(base: str) -> list[ResourceType]:
    found = []
    for name, model in RESOURCES.items():
        rtype = ResourceType.from_resource(model)
        rtype.id = name
        rtype.name = name
        rtype.endpoint = ENDPOINTS[name]
        found.append(rtype)
    return found


@scim_view
def resource_types(request, name: str | None = None):
    _get_only(request)
    found = _resource_types(_base(request))
    if name is None:
        return _listing(found)
    match = next((r for r in found if r.id == name), None)
    if match is None:
        raise NotFoundException(detail=f"no resource type '{name}'")
    return _json(_dump(match))


def _schemas():
    return [model.to_schema() for model in RESOURCES.values()]


@scim_view
def schemas(request, urn: str | None = None):
    _get_only(request)
    found = _schemas()
    if urn is None:
        return _listing(found)
    match = next((s for s in found if s.id == urn), None)
    if match is None:
        raise NotFoundException(detail=f"no schema '{urn}'")
    return _json(_dump(match))


def _listing(resources: list) -> HttpResponse:
    body = {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:ListResponse"],
        "totalResults": len(resources),
        "startIndex": 1,
        "itemsPerPage": len(resources),
        "Resources": [_dump(r) for r in resources],
    }
    return _json(body)


# --- Users and Groups ---


@scim_view
def users(request):
    tenant, key, base = request.scim_key.tenant, request.scim_key, _base(request)
    if request.method == "POST":
        new = _body(request, User, Context.RESOURCE_CREATION_REQUEST)
        principal = services.scim_user_create(tenant=tenant, user=new, key=key)
        return _created(selectors.user(tenant=tenant, user_id=principal.external_id, base=base))
    _get_only(request)
    found = selectors.users(tenant=tenant, base=_base(request), where=_filter(request, User))
    return _page(request, found)


@scim_view
def user(request, user_id: str):
    tenant, key, base = request.scim_key.tenant, request.scim_key, _base(request)
    found = selectors.user(tenant=tenant, user_id=user_id, base=base)
    if found is None:
        raise NotFoundException(detail=f"no user '{user_id}'")
    if request.method == "GET":
        return _json(_dump(found))
    principal = Principal.objects.get(tenant=tenant, external_id=user_id)
    if request.method == "DELETE":
        services.scim_user_delete(principal=principal, key=key)
        return HttpResponse(status=204)
    if request.method == "PUT":
        wanted = _body(request, User, Context.RESOURCE_REPLACEMENT_REQUEST)
    elif request.method == "PATCH":
        wanted = _patched(request, found, User)
    else:
        _get_only(request)
    services.scim_user_replace(principal=principal, user=wanted, key=key)
    return _json(_dump(selectors.user(tenant=tenant, user_id=user_id, base=base)))


@scim_view
def groups(request):
    tenant, key, base = request.scim_key.tenant, request.scim_key, _base(request)
    if request.method == "POST":
        new = _body(request, Group, Context.RESOURCE_CREATION_REQUEST)
        team = services.scim_group_create(tenant=tenant, group=new, key=key)
        return _created(selectors.group(tenant=tenant, group_id=team.name, base=base))
    _get_only(request)
    found = selectors.groups(tenant=tenant, base=_base(request), where=_filter(request, Group))
    return _page(request, found)


@scim_view
def group(request, group_id: str):
    tenant, key, base = request.scim_key.tenant, request.scim_key, _base(request)
    found = selectors.group(tenant=tenant, group_id=group_id, base=base)
    if found is None:
        raise NotFoundException(detail=f"no group '{group_id}'")
    if request.method == "GET":
        return _json(_dump(found))
    team = Team.objects.get(tenant=tenant, name=group_id)
    if request.method == "DELETE":
        services.scim_group_delete(team=team, key=key)
        return HttpResponse(status=204)
    if request.method == "PUT":
        wanted = _body(request, Group, Context.RESOURCE_REPLACEMENT_REQUEST)
    elif request.method == "PATCH":
        wanted = _patched(request, found, Group)
    else:
        _get_only(request)
    services.scim_group_replace(team=team, group=wanted, key=key)
    return _json(_dump(selectors.group(tenant=tenant, group_id=group_id, base=base)))


@scim_view
def unknown(request, rest: str):
    raise NotFoundException(detail=f"no SCIM endpoint '/{rest}'")


urlpatterns = [
    path("scim/v2/ServiceProviderConfig", service_provider_config),
    path("scim/v2/ResourceTypes", resource_types),
    path("scim/v2/ResourceTypes/<str:name>", resource_types),
    path("scim/v2/Schemas", schemas),
    path("scim/v2/Schemas/<str:urn>", schemas),
    path("scim/v2/Users", users),
    path("scim/v2/Users/<str:user_id>", user),
    path("scim/v2/Groups", groups),
    path("scim/v2/Groups/<str:group_id>", group),
    path("scim/v2/<path:rest>", unknown),
]
