"""SCIM 2.0 (RFC 7643/7644) at /scim/v2/: Users (principals) and Groups (teams) of the key's
tenant, searches (`GET` with query parameters, `POST .../.search`, `POST /.search` over both),
and the discovery endpoints (ServiceProviderConfig, ResourceTypes, Schemas).

Authenticated by a key with the `scim` scope (bound to no principal): no key or a bad one is
401, a key without the scope 403, each in SCIM's error shape
(`urn:ietf:params:scim:api:messages:2.0:Error`). Another tenant's user or group is a 404 like
a missing one (console/access.py). Resources, searches, list responses, `attributes` /
`excludedAttributes`, errors and the filter grammar are scim2-models', on the served models
(console/schemas_scim.py); this module only translates HTTP to the selectors (and, for
changes, the directory's services).
"""

from __future__ import annotations

import json
from functools import wraps

from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt
from pydantic import ValidationError as PydanticValidationError
from scim2_models import Context, ListResponse, PatchOp, ResponseParameters, SearchRequest
from scim2_models import Error as ScimError
from scim2_models.exceptions import (
    InvalidSyntaxException,
    NotFoundException,
    SCIMException,
)

from console.core.errors import Conflict, GavelError, Invalid
from console.core.wire import strict_json
from console.directory import access
from console.directory import selectors_scim as selectors
from console.directory.schemas.scim import (
    CONFIG,
    MAX_RESULTS,
    POLICY,
    PROVIDER,
    ScimGroup,
    ScimUser,
)
from console.directory.services import scim as services
from console.web.auth import KeyAuth

CONTENT_TYPE = "application/scim+json"
DEFAULT_COUNT = 100
ScimAny = ScimUser | ScimGroup
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
            with POLICY:
                return view(request, *args, **kwargs)
        except SCIMException as error:
            return _json(error.to_error().model_dump(), status=error.status)
        except PydanticValidationError as error:
            found = ScimError.from_validation_errors(error)[0]
            return _json(found.model_dump(), status=int(found.status or 400))
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


class MethodNotAllowed(SCIMException):
    status = 405


def _only(request, *methods: str) -> None:
    if request.method not in methods:
        raise MethodNotAllowed(detail=f"{request.method} is not allowed here")


def _raw(request) -> dict:
    try:
        raw = strict_json(request.body or b"{}")
    except ValueError:  # not JSON, or nested deeper than the parser's recursion allows
        raise InvalidSyntaxException(detail="the body is not JSON") from None
    if not isinstance(raw, dict):
        raise InvalidSyntaxException(detail="the body must be a JSON object")
    return raw


def _body(request, model, ctx, *, defaults: dict | None = None):
    """The request's resource (or message), validated by scim2-models in its context. An
    attribute in `defaults` the body leaves out gets that value (`active`: a principal always
    is active or not)."""
    raw = _raw(request)
    for name, value in (defaults or {}).items():
        if not any(k.casefold() == name.casefold() for k in raw):
            raw[name] = value
    return model.model_validate(raw, scim_ctx=ctx)


# --- what a response carries: attributes / excludedAttributes (RFC 7644 3.9) ---


def _shown(request, model) -> ResponseParameters:
    query = {
        name: request.GET[name]
        for name in ("attributes", "excludedAttributes")
        if request.GET.get(name)
    }
    return ResponseParameters[model].model_validate(query)


def _resource(request, resource, ctx, status: int = 200) -> HttpResponse:
    shown = _shown(request, type(resource))
    response = _json(resource.model_dump(scim_ctx=ctx, response_parameters=shown), status)
    if status == 201:
        response["Location"] = resource.meta.location
    return response


# --- searches: GET with query parameters, POST .search (RFC 7644 3.4.2, 3.4.3) ---

_QUERY = ("filter", "sortBy", "sortOrder", "startIndex", "count", "attributes")
_QUERY += ("excludedAttributes",)


def _query(request, model) -> SearchRequest:
    """A GET's query parameters as the SearchRequest they stand for."""
    query = {name: request.GET[name] for name in _QUERY if request.GET.get(name, "") != ""}
    return _paged(SearchRequest[model].model_validate(query, scim_ctx=Context.SEARCH_REQUEST))


def _searched(request, model) -> SearchRequest:
    """A POST .search's body."""
    body = _raw(request)
    return _paged(SearchRequest[model].model_validate(body, scim_ctx=Context.SEARCH_REQUEST))


def _paged(search: SearchRequest) -> SearchRequest:
    """startIndex is 1-based (below 1 means 1), count defaults to DEFAULT_COUNT and is capped
    at MAX_RESULTS (below 0 means 0)."""
    count = DEFAULT_COUNT if search.count is None else search.count
    return search.model_copy(
        update={"start_index": search.start_index or 1, "count": min(count, MAX_RESULTS)}
    )


def _listing(search: SearchRequest, resources: list, ctx) -> HttpResponse:
    total, page = selectors.search(search, resources)
    listing = ListResponse[ScimAny](
        total_results=total,
        start_index=search.start_index,
        items_per_page=len(page),
        resources=page,
    )
    return _json(listing.model_dump(scim_ctx=ctx, response_parameters=search))


# --- discovery ---


def _discovery(found: list) -> HttpResponse:
    body = {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:ListResponse"],
        "totalResults": len(found),
        "startIndex": 1,
        "itemsPerPage": len(found),
        "Resources": [r.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE) for r in found],
    }
    return _json(body)


def _one(found: list, key: str, name: str, kind: str) -> HttpResponse:
    match = next((r for r in found if getattr(r, key) == name), None)
    if match is None:
        raise NotFoundException(detail=f"no {kind} '{name}'")
    return _json(match.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE))


@scim_view
def service_provider_config(request):
    _only(request, "GET")
    return _json(CONFIG.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE))


@scim_view
def resource_types(request, name: str | None = None):
    _only(request, "GET")
    found = list(PROVIDER.resource_types)
    return _discovery(found) if name is None else _one(found, "id", name, "resource type")


@scim_view
def schemas(request, urn: str | None = None):
    _only(request, "GET")
    found = list(PROVIDER.schemas)
    return _discovery(found) if urn is None else _one(found, "id", urn, "schema")


# --- Users and Groups ---


@scim_view
def users(request):
    key, base = request.scim_key, _base(request)
    if request.method == "POST":
        new = _body(request, ScimUser, Context.RESOURCE_CREATION_REQUEST, defaults={"active": True})
        deleted = access.scim_deleted_user(key=key, user_name=new.user_name)
        principal = services.scim_user_create(tenant=key.tenant, user=new, key=key, deleted=deleted)
        created = selectors.user(key=key, user_id=principal.external_id, base=base)
        return _resource(request, created, Context.RESOURCE_CREATION_RESPONSE, status=201)
    _only(request, "GET")
    found = selectors.users(key=key, base=base)
    return _listing(_query(request, ScimUser), found, Context.RESOURCE_QUERY_RESPONSE)


@scim_view
def user(request, user_id: str):
    key, base = request.scim_key, _base(request)
    principal = access.scim_user(key=key, user_id=user_id)
    found = selectors.user_of(principal, base=base)
    if request.method == "GET":
        return _resource(request, found, Context.RESOURCE_QUERY_RESPONSE)
    if request.method == "DELETE":
        services.scim_user_delete(principal=principal, key=key)
        return HttpResponse(status=204)
    if request.method == "PUT":
        ctx = Context.RESOURCE_REPLACEMENT_REQUEST
        wanted = _body(request, ScimUser, ctx, defaults={"active": principal.is_active})
        wanted.replace(found)  # read-only attributes kept, immutable ones checked
        services.scim_user_replace(principal=principal, user=wanted, key=key)
        ctx = Context.RESOURCE_REPLACEMENT_RESPONSE
    else:
        _only(request, "PATCH")
        patched = found.model_copy(deep=True)
        _body(request, PatchOp[ScimUser], Context.RESOURCE_PATCH_REQUEST).patch(patched)
        services.scim_user_patch(principal=principal, before=found, after=patched, key=key)
        ctx = Context.RESOURCE_PATCH_RESPONSE
    return _resource(request, selectors.user(key=key, user_id=user_id, base=base), ctx)


@scim_view
def users_search(request):
    _only(request, "POST")
    found = selectors.users(key=request.scim_key, base=_base(request))
    return _listing(_searched(request, ScimUser), found, Context.SEARCH_RESPONSE)


@scim_view
def groups(request):
    key, base = request.scim_key, _base(request)
    if request.method == "POST":
        new = _body(request, ScimGroup, Context.RESOURCE_CREATION_REQUEST)
        team = services.scim_group_create(tenant=key.tenant, group=new, key=key)
        created = selectors.group(key=key, group_id=team.name, base=base)
        return _resource(request, created, Context.RESOURCE_CREATION_RESPONSE, status=201)
    _only(request, "GET")
    found = selectors.groups(key=key, base=base)
    return _listing(_query(request, ScimGroup), found, Context.RESOURCE_QUERY_RESPONSE)


@scim_view
def group(request, group_id: str):
    key, base = request.scim_key, _base(request)
    team = access.scim_group(key=key, group_id=group_id)
    found = selectors.group_of(team, base=base)
    if request.method == "GET":
        return _resource(request, found, Context.RESOURCE_QUERY_RESPONSE)
    if request.method == "DELETE":
        services.scim_group_delete(team=team, key=key)
        return HttpResponse(status=204)
    if request.method == "PUT":
        wanted = _body(request, ScimGroup, Context.RESOURCE_REPLACEMENT_REQUEST)
        wanted.replace(found)  # displayName (the team's name and id) cannot change
        ctx = Context.RESOURCE_REPLACEMENT_RESPONSE
    else:
        _only(request, "PATCH")
        wanted = found.model_copy(deep=True)
        _body(request, PatchOp[ScimGroup], Context.RESOURCE_PATCH_REQUEST).patch(wanted)
        ctx = Context.RESOURCE_PATCH_RESPONSE
    services.scim_group_replace(team=team, group=wanted, key=key)
    return _resource(request, selectors.group(key=key, group_id=group_id, base=base), ctx)


@scim_view
def groups_search(request):
    _only(request, "POST")
    found = selectors.groups(key=request.scim_key, base=_base(request))
    return _listing(_searched(request, ScimGroup), found, Context.SEARCH_RESPONSE)


@scim_view
def root_search(request):
    """POST /.search: Users and Groups at once (an attribute one of them lacks matches none
    of its resources, RFC 7644 3.4.2.1)."""
    _only(request, "POST")
    key, base = request.scim_key, _base(request)
    found = selectors.users(key=key, base=base) + selectors.groups(key=key, base=base)
    return _listing(_searched(request, ScimAny), found, Context.SEARCH_RESPONSE)


@scim_view
def unknown(request, rest: str):
    raise NotFoundException(detail=f"no SCIM endpoint '/{rest}'")
