"""Domain errors. Raised by services and access checks; mapped once to the contract's error body
(console/api.py for the API, the views' error pages for the browser)."""


class GavelError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, details=None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details


class Unauthorized(GavelError):
    status = 401
    code = "unauthorized"


class Forbidden(GavelError):
    status = 403
    code = "forbidden"


class NotFound(GavelError):
    status = 404
    code = "not_found"


class PayloadTooLarge(GavelError):
    status = 413
    code = "payload_too_large"


class Invalid(GavelError):
    status = 422
    code = "invalid"


class Conflict(GavelError):
    status = 409
    code = "conflict"


class RateLimited(GavelError):
    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class Unavailable(GavelError):
    status = 503
    code = "unavailable"

    def __init__(self, message: str, *, retry_after: int = 5, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class DatabaseUnavailable(Unavailable):
    """The database cannot be reached (refused, timed out, the pool found no connection in
    DB_POOL_TIMEOUT): the request changed nothing, and the same request later may succeed."""

    code = "database_unavailable"
    RETRY_AFTER = 5

    def __init__(self, message: str = "the database is unreachable; retry later", **kwargs):
        kwargs.setdefault("retry_after", self.RETRY_AFTER)
        super().__init__(message, **kwargs)
