"""Exceptions carrying the contract's error body: `{"error": {"code", "message", "details"}}`.

Every error the console answers with becomes a `GavelError` subclass chosen by status, with
`.status`, `.code` (the contract's snake_case code), `.message` and `.details`.
"""

from __future__ import annotations

from typing import Any


class GavelError(Exception):
    """Base of every SDK error."""

    status: int | None = None

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        status: int | None = None,
        details: Any = None,
        retry_after: float | None = None,
    ):
        super().__init__(f"{code}: {message}" if code else message)
        self.message = message
        self.code = code
        if status is not None:
            self.status = status
        self.details = details
        self.retry_after = retry_after


class ConnectionFailed(GavelError):
    """The console could not be reached (or kept answering 5xx) after every retry."""


class Unauthorized(GavelError):
    status = 401


class Forbidden(GavelError):
    status = 403


class NotFound(GavelError):
    status = 404


class PayloadTooLarge(GavelError):
    status = 413


class ValidationFailed(GavelError):
    """422: `details` lists each field path and what is wrong with it."""

    status = 422


class Conflict(GavelError):
    """409: `details` says what the server holds."""

    status = 409


class SeqGap(Conflict):
    """409 `seq_gap`: a batch would leave a gap; `expected_seq` is where the server is."""

    @property
    def expected_seq(self) -> int:
        return int(self.details["expectedSeq"])


class AlreadyDecided(Conflict):
    """409 `already_decided`: someone decided this call first (`details.decidedBy`)."""


class RateLimited(GavelError):
    status = 429


class ServerError(GavelError):
    """A 5xx answer (retried with backoff before it is raised)."""


class Unavailable(ServerError):
    status = 503


class DecisionsTimeout(GavelError):
    """`wait_for_decisions` ran out of time with calls still pending (`.pending`)."""

    def __init__(self, message: str, *, pending: list[str], decisions: Any = None):
        super().__init__(message, code="decisions_timeout")
        self.pending = pending
        self.decisions = decisions


_BY_STATUS = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: ValidationFailed,
    429: RateLimited,
    503: Unavailable,
}
_BY_CODE = {"seq_gap": SeqGap, "already_decided": AlreadyDecided}


def error_from_response(status: int, body: Any, retry_after: float | None = None) -> GavelError:
    """The exception for an error answer, from the contract's body (or a bare status)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"code": f"http_{status}", "message": f"HTTP {status}", "details": body}
    code = str(error.get("code") or f"http_{status}")
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else GavelError
    return cls(
        str(error.get("message") or f"HTTP {status}"),
        code=code,
        status=status,
        details=error.get("details"),
        retry_after=retry_after,
    )
