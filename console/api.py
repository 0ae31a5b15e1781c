"""The one public API (`/api/v1/`): the contract's error body and the routers of the apps
(who is calling: console/auth.py).

Handlers only translate between the wire (camelCase schemas) and services; domain errors are
exceptions (console.errors) mapped here, once.
"""

import asyncio
import functools
import json
import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SynchronousOnlyOperation
from django.db import DataError, InterfaceError, OperationalError, connection, transaction
from django.http import Http404
from django.urls import URLPattern, register_converter
from django.urls import path as django_path
from django.urls.converters import StringConverter
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser

from approvals import access as approvals_access
from approvals.api import router as approvals_router
from approvals.api_rules import router as rules_router
from approvals.api_webhooks import router as webhooks_router
from budgets import access as budgets_access
from budgets.api import router as budgets_router
from console.audit.log import audit_refused
from console.core import db
from console.core.errors import DatabaseUnavailable, GavelError, Unavailable
from console.core.wire import strict_json, unstorable_text
from console.directory import access, signin
from console.manage.api.audit import router as audit_router
from console.manage.api.directory import router as directory_router
from console.manage.api.keys import router as keys_router
from console.manage.api.oidc import router as oidc_router
from gateway.access import server_for
from gateway.api import router as mcp_router
from notifications.api import router as notifications_router
from ops.context import current_request_id
from retention.api import router as retention_router
from runs import access as runs_access
from runs.api import router as runs_router
from runs.api_state import router as runs_state_router

logger = logging.getLogger("console.api")

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


class WireStringConverter(StringConverter):
    """A path segment without U+0000: no stored id can hold it (PostgreSQL text cannot), so a
    path with one names nothing and answers 404 like any unknown address."""

    regex = "[^/\x00]+"


register_converter(WireStringConverter, "wire")


class GavelAPI(NinjaAPI):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._schemas: dict[str, str] = {}  # get_openapi_schema's by path prefix, as JSON

    def _get_urls(self):
        return [_wire_route(pattern) for pattern in super()._get_urls()]

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        """The served schema names path parameters as the contract does, lists every error
        status each operation can answer, and says that no string holds U+0000. Built once
        per process and path prefix (0.5 s a time here, 3 s the first; the operations are fixed
        when the process starts): each caller gets its own copy."""
        if path_prefix is None:  # as ninja finds it (the URLconf in force)
            path_prefix = self.get_root_path(path_params or {})
        if path_prefix not in self._schemas:
            self._schemas[path_prefix] = json.dumps(self._built_schema(path_prefix))
        return json.loads(self._schemas[path_prefix])

    def _built_schema(self, path_prefix: str) -> dict:
        schema = super().get_openapi_schema(path_prefix=path_prefix)
        paths = {}
        for path, item in schema["paths"].items():
            for py, wire in WIRE_PATH_PARAMS.items():
                path = path.replace("{" + py + "}", "{" + wire + "}")
            for operation in item.values():
                for param in operation.get("parameters", []):
                    if param.get("in") == "path":
                        param["name"] = WIRE_PATH_PARAMS.get(param["name"], param["name"])
                _document_errors(operation)
            paths[path] = item
        schema["paths"] = paths
        _no_nul_strings(schema)
        return schema


# Every operation may answer these (no or a bad key, a missing scope or capability, a bad
# query, the rate limit, an unforeseen failure, the database away); 404 where the path names
# an object, 413 where there is a body.
ALWAYS_ERRORS = (401, 403, 422, 429, 500, 503)
NO_NUL_PATTERN = "^[^\\u0000]*$"


def _document_errors(operation: dict) -> None:
    responses = operation.setdefault("responses", {})
    codes = list(ALWAYS_ERRORS)
    if any(p.get("in") == "path" for p in operation.get("parameters", [])):
        codes.append(404)
    if "requestBody" in operation:
        codes.append(413)
    for code in codes:
        responses.setdefault(
            code,
            {
                "description": "the contract's error body",
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}
                },
            },
        )


def _no_nul_strings(node) -> None:
    """A string the API takes or gives never holds U+0000 (PostgreSQL text cannot): each
    free-form string schema, and each map's keys, say so with a pattern."""
    if isinstance(node, list):
        for item in node:
            _no_nul_strings(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "string" and not {"pattern", "format", "enum", "const"} & set(node):
        node["pattern"] = NO_NUL_PATTERN
    if isinstance(node.get("additionalProperties"), dict) and "propertyNames" not in node:
        node["propertyNames"] = {"pattern": NO_NUL_PATTERN}
    for key, value in node.items():
        if key not in ("example", "examples", "default", "const", "enum"):
            _no_nul_strings(value)


def _wire_route(pattern):
    route = str(pattern.pattern)
    if not isinstance(pattern, URLPattern) or "<" not in route or ":" in route.split(">")[0]:
        return pattern
    route = route.replace("<", "<wire:")
    return django_path(route, pattern.callback, name=pattern.name)


class UnstorableText(ValueError):
    def __init__(self, errors: list[dict]):
        super().__init__(errors[0]["msg"])
        self.errors = errors


class StrictJSONParser(Parser):
    """JSON as RFC 8259 defines it. Python's parser also takes NaN and Infinity, which no
    JSON column stores alike (PostgreSQL refuses them): a body with them does not parse, and
    is answered 422 "not valid JSON" like any other.

    Nor can PostgreSQL text or jsonb hold U+0000 (nor UTF-8 a lone surrogate): a string or key
    with one, anywhere in the body or the query, is a 422 naming where it is (ninja turns
    any exception of a body parser into a 400 whose cause it is)."""

    def parse_body(self, request):
        data = strict_json(request.body)
        found = unstorable_text(request.body, data)
        if found is not None:
            where, problem = found
            raise UnstorableText([{"loc": ("body", *where), "msg": problem}])
        return data

    def parse_querydict(self, data, list_fields, request):
        for key, values in data.lists():
            if "\x00" in key or any("\x00" in v for v in values):
                raise NinjaValidationError(
                    [
                        {
                            "loc": ("query", key.replace("\x00", "\\u0000")),
                            "msg": "U+0000 (NUL) is not allowed in a query parameter",
                        }
                    ]
                )
        return super().parse_querydict(data, list_fields, request)


api = GavelAPI(
    parser=StrictJSONParser(),
    title="Gavel API",
    version="1.1",
    description="Gavel's wire contract (v1.1): what agent runtimes use (runs, events, states, "
    "outcomes, approvals, decisions, the budget check), what reviewers, leads and admins use "
    "(usage, budgets, rules, notifications, principals, roles, teams, keys, webhooks, tenant "
    "settings, single sign-on, the audit log). Authorize with an API key (`Bearer`). "
    "See docs/api.md.",
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
        runs_access.run_in_tenant(tenant_id=tenant_id, run_id=kwargs["run_id"])
    if "approval_id" in kwargs:
        approvals_access.approval_in_tenant(tenant_id=tenant_id, approval_id=kwargs["approval_id"])
    if "rule_id" in kwargs:
        approvals_access.rule_in_tenant(tenant_id=tenant_id, rule_id=kwargs["rule_id"])
    if "budget_id" in kwargs:
        budgets_access.budget_in_tenant(tenant_id=tenant_id, budget_id=kwargs["budget_id"])
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
        approvals_access.webhook_in_tenant(tenant_id=tenant_id, webhook_id=kwargs["webhook_id"])
    if "mcp_server_name" in kwargs:
        server_for(tenant_id=tenant_id, name=kwargs["mcp_server_name"])


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
    except SynchronousOnlyOperation:
        pass  # an async operation (the long-poll): it looks its run up itself, in a thread
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
    if isinstance(exc.__cause__, UnstorableText):
        return on_validation_error(request, NinjaValidationError(exc.__cause__.errors))
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
    """The database did not answer: 503 with Retry-After (console.db.unreachable); the
    operation's transaction, if any, has rolled back."""
    logger.warning("database_unavailable on %s %s: %s", request.method, request.path, exc)
    return on_gavel_error(request, DatabaseUnavailable())


def _out_of_range(exc) -> bool:
    text = str(exc).lower()
    return isinstance(exc, OverflowError) or "out of range" in text or "overflow" in text


@api.exception_handler(DataError)
@api.exception_handler(OverflowError)
def on_out_of_range(request, exc):
    """Each number is bounded at the schema edge by the column that stores it; what can still
    overflow is a sum (a run's usage, a tenant's day). The service's transaction has rolled
    back: nothing was written, and the answer is a 422 like any value out of range."""
    if not _out_of_range(exc):
        return on_unexpected(request, exc)
    details = [{"path": "body", "message": "a number, or a total it adds to, is out of range"}]
    return error_response(
        request, 422, "validation_error", "a value is out of the range the console stores", details
    )


@api.exception_handler(Http404)
def on_http404(request, exc):
    return error_response(request, 404, "not_found", "not found")


def request_id() -> str:
    return current_request_id()  # the request's own id (ops/middleware.py), as X-Request-Id


@api.exception_handler(Exception)
def on_unexpected(request, exc):
    """Anything unforeseen: the contract's body (never Django's HTML page), and the traceback
    in the log under the request id the client is given, so a report can be matched."""
    if db.unreachable(exc):  # raw psycopg's own errors (Django's are mapped above)
        return on_database_down(request, exc)
    rid = request_id()
    logger.error("internal_error %s on %s %s", rid, request.method, request.path, exc_info=exc)
    return error_response(
        request,
        500,
        "internal_error",
        "the server failed to answer this request; it has been logged",
        {"requestId": rid},
        headers={"X-Request-Id": rid},
    )


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _one_transaction(handler):
    """A change through the API and the answer read after it are one transaction: a request
    that fails after its write (the database lost while the answer is read, an error in it)
    leaves nothing written, as the contract says ("a request that fails changes nothing: no
    partial writes"); a service's deliberate refusal commits what it wrote before it. The
    services' own transactions nest in it as savepoints; what they hand to `on_commit`
    (publishes, seals, mails) runs when it commits, before the answer is sent. Reads, the
    async long poll (which waits outside any transaction), and a handler marked
    `own_transaction` (the events batch: its answer is its transaction's) pass."""
    if asyncio.iscoroutinefunction(handler) or getattr(handler, "own_transaction", False):
        return handler

    @functools.wraps(handler)
    def in_one_transaction(request, *args, **kwargs):
        if request.method in SAFE_METHODS:
            return handler(request, *args, **kwargs)
        with transaction.atomic():
            try:
                return handler(request, *args, **kwargs)
            except Unavailable:
                raise
            except GavelError as refused:
                # A refusal (404, 409, 422, ...) keeps what its service committed on purpose
                # before refusing, as without this transaction: a decision on a call past its
                # expiry leaves it expired (approvals.services.decisions). Its services' own
                # writes that failed rolled back in their savepoints.
                refusal = refused
        raise refusal

    return in_one_transaction


api.add_decorator(_one_transaction)  # mode "operation": the handler, after validation
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
api.add_router("/", mcp_router)  # upstream MCP servers of the gateway (admin)
api.add_router("/", retention_router)  # retention policy, run and tenant exports (admin)
