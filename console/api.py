"""The one public API (`/api/v1/`): the contract's error body and the routers of the apps
(who is calling: console/auth.py).

Handlers only translate between the wire (camelCase schemas) and services; domain errors are
exceptions (console.errors) mapped here, once.
"""

import asyncio

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError, connection
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser

from approvals.api import router as approvals_router
from approvals.api_rules import router as rules_router
from approvals.api_webhooks import router as webhooks_router
from budgets.api import router as budgets_router
from console import access, signin
from console.api_audit import router as audit_router
from console.api_directory import router as directory_router
from console.api_keys import router as keys_router
from console.api_oidc import router as oidc_router
from console.errors import GavelError
from console.schemas import strict_json
from console.services.auditlog import audit_refused
from notifications.api import router as notifications_router
from runs.api import router as runs_router
from runs.api_state import router as runs_state_router

# Path parameters are snake_case in Python (`run_id`) and camelCase in the contract (`runId`).
WIRE_PATH_PARAMS = {
    "run_id": "runId",
    "approval_id": "approvalId",
    "notification_id": "notificationId",
    "rule_id": "ruleId",
    "budget_id": "budgetId",
    "principal_id": "principalId",
    "role_name": "name",
    "team_name": "name",
    "key_id": "keyId",
    "webhook_id": "webhookId",
}


class GavelAPI(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        """The served schema names path parameters as the contract does."""
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        paths = {}
        for path, item in schema["paths"].items():
            for py, wire in WIRE_PATH_PARAMS.items():
                path = path.replace("{" + py + "}", "{" + wire + "}")
            for operation in item.values():
                for param in operation.get("parameters", []):
                    if param.get("in") == "path":
                        param["name"] = WIRE_PATH_PARAMS.get(param["name"], param["name"])
            paths[path] = item
        schema["paths"] = paths
        return schema


class StrictJSONParser(Parser):
    """JSON as RFC 8259 defines it. Python's parser also takes NaN and Infinity, which no
    JSON column stores alike (PostgreSQL refuses them): a body with them does not parse, and
    is answered 422 "not valid JSON" like any other."""

    def parse_body(self, request):
        return strict_json(request.body)


api = GavelAPI(
    parser=StrictJSONParser(),
    title="Gavel API",
    version="1",
    description="The wire contract agent runtimes use: runs, events, states, outcomes, "
    "approvals and decisions. See docs/api.md.",
    urls_namespace="api",
    docs_url="/docs",
)


def error_response(request, status: int, code: str, message: str, details=None, headers=None):
    response = api.create_response(
        request,
        {"error": {"code": code, "message": message, "details": details}},
        status=status,
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _check_path_objects(request) -> None:
    """404 comes before 413 and 422: is the path's object in the key's tenant?"""
    key = getattr(request, "auth", None)
    match = getattr(request, "resolver_match", None)
    if key is None or match is None:
        return
    tenant_id = getattr(key, "tenant_id", None)
    if tenant_id is None:
        return
    kwargs = match.kwargs
    if "run_id" in kwargs and request.method != "PUT":  # PUT .../state may create the run
        access.run_in_tenant(tenant_id=tenant_id, run_id=kwargs["run_id"])
    if "approval_id" in kwargs:
        access.approval_in_tenant(tenant_id=tenant_id, approval_id=kwargs["approval_id"])
    if "rule_id" in kwargs:
        access.rule_in_tenant(tenant_id=tenant_id, rule_id=kwargs["rule_id"])
    if "budget_id" in kwargs:
        access.budget_in_tenant(tenant_id=tenant_id, budget_id=kwargs["budget_id"])
    for param, kind in (
        ("principal_id", "principal"),
        ("role_name", "role"),
        ("team_name", "team"),
    ):
        if param in kwargs:
            access.directory_in_tenant(tenant_id=tenant_id, kind=kind, name=kwargs[param])
    if "key_id" in kwargs:
        access.key_in_tenant(tenant_id=tenant_id, key_id=kwargs["key_id"])
    if "webhook_id" in kwargs:
        access.webhook_in_tenant(tenant_id=tenant_id, webhook_id=kwargs["webhook_id"])


def _field_path(loc) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path"):
        head = parts.pop(0)
        if head == "body" and parts and parts[0] == "payload":
            parts.pop(0)
        if head != "body":
            parts.insert(0, head)
    return ".".join(parts) or "body"


def _refusal_actor(request):
    """Who was refused: the key or principal the auth classes found (console.auth leaves it on
    the request even when it then refuses it), else the signed-in browser's principal."""
    actor = getattr(request, "auth", None) or getattr(request, "gavel_actor", None)
    if actor is None and getattr(request, "user", None) and request.user.is_authenticated:
        actor = access.principal_for_user(request)
    return actor


def _audit_refusal(request, code: str, message: str) -> None:
    """Every 403 of the API is audited `authz.refused` (rate-limited, console.services.auditlog).
    The held long-poll's key check audits its own refusal in its worker thread (console.auth);
    any other refusal on the async path is written from a worker thread."""
    if getattr(request, "gavel_refusal_audited", False):
        return
    facts = {
        "path": request.path,
        "method": request.method,
        "reason": message,
        "code": code,
        "ip": signin.client_address(request),
        "user_agent": request.META.get("HTTP_USER_AGENT") or None,
    }
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        audit_refused(actor=_refusal_actor(request), **facts)
        return

    def record():
        try:
            audit_refused(actor=_refusal_actor(request), **facts)
        finally:
            connection.close()

    loop.run_in_executor(None, record)


@api.exception_handler(GavelError)
def on_gavel_error(request, exc: GavelError):
    if exc.status == 403:
        _audit_refusal(request, exc.code, exc.message)
    headers = {}
    if getattr(exc, "retry_after", None):
        headers["Retry-After"] = str(exc.retry_after)
    return error_response(request, exc.status, exc.code, exc.message, exc.details, headers)


@api.exception_handler(NinjaValidationError)
def on_validation_error(request, exc: NinjaValidationError):
    try:
        _check_path_objects(request)
    except GavelError as err:
        return on_gavel_error(request, err)
    details = [
        {"path": _field_path(err.get("loc", ())), "message": err.get("msg", "invalid")}
        for err in exc.errors
    ]
    return error_response(request, 422, "validation_error", "the request body is invalid", details)


@api.exception_handler(RequestDataTooBig)
def on_too_big(request, exc):
    try:
        _check_path_objects(request)
    except GavelError as err:
        return on_gavel_error(request, err)
    limit = settings.GAVEL_MAX_BODY_BYTES
    return error_response(
        request,
        413,
        "payload_too_large",
        f"the body is over the {limit}-byte limit",
        {"limitBytes": limit},
    )


@api.exception_handler(AuthenticationError)
def on_unauthenticated(request, exc):
    return error_response(
        request,
        401,
        "unauthorized",
        "a valid API key is required (Authorization: Bearer <key>)",
        headers={"WWW-Authenticate": "Bearer"},
    )


@api.exception_handler(HttpError)
def on_http_error(request, exc: HttpError):
    if exc.status_code == 400 and str(exc.message).startswith("Cannot parse request body"):
        # A body that is not JSON at all does not validate: 422 (the contract names no 400),
        # after the 404 check.
        try:
            _check_path_objects(request)
        except GavelError as err:
            return on_gavel_error(request, err)
        details = [{"path": "body", "message": "not valid JSON"}]
        return error_response(
            request, 422, "validation_error", "the body is not valid JSON", details
        )
    code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, "error"
    )
    if exc.status_code == 403:  # ninja's CSRF check of a browser session
        _audit_refusal(request, "csrf_failed", str(exc.message))
    return error_response(request, exc.status_code, code, exc.message)


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def on_database_down(request, exc):
    return error_response(
        request,
        503,
        "database_unavailable",
        "the database is unreachable; retry later",
        headers={"Retry-After": "5"},
    )


api.add_router("/", runs_router)
api.add_router("/", runs_state_router)  # states and outcomes
api.add_router("/", approvals_router)
api.add_router("/", webhooks_router)
api.add_router("/", notifications_router)
api.add_router("/", rules_router)  # lasting decision rules (manage scope, manage_rules)
api.add_router("/", budgets_router)
api.add_router("/", directory_router)  # principals, roles, teams (admin)
api.add_router("/", keys_router)  # API keys, tenant settings (admin)
api.add_router("/", audit_router)  # the audit log (admin)
api.add_router("/", oidc_router)  # single sign-on settings (admin)
