"""Gavel settings: one module, driven by the environment, failing loudly on bad values.

Every variable is listed in README.md and .env.example.
"""

import os
import secrets
from email.utils import parseaddr
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
import dj_email_url
from django.core.exceptions import ImproperlyConfigured

from ops import logs as ops_logs

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("GAVEL_VAR_DIR", BASE_DIR / "var"))

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={raw!r} is not a boolean: use one of 1/true/yes/on or 0/false/no/off"
    )


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be >= {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_cidrs(name: str) -> tuple:
    """A comma list of networks (`10.0.0.0/8`, `127.0.0.1`, `fd00::/8`); anything else stops
    start-up, naming the entry."""
    import ipaddress

    networks = []
    for item in env_list(name, []):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP network") from None
    return tuple(networks)


def env_secret(name: str, *, debug: bool) -> str:
    value = os.environ.get(name, "")
    if value:
        return value
    if not debug:
        raise ImproperlyConfigured(f"{name} is required when DEBUG is off")
    # Development: a key generated once into var/, so sessions survive restarts.
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    key_file = VAR_DIR / "dev-secret-key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


def env_key(name: str, *, min_length: int) -> str:
    """An optional secret (unset or empty: ""), at least `min_length` characters when set."""
    value = os.environ.get(name, "")
    if value and len(value.strip()) < min_length:
        raise ImproperlyConfigured(f"{name} must be at least {min_length} characters")
    return value


def env_database(name: str) -> dict:
    url = os.environ.get(name, "").strip()
    if not url:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "gavel.sqlite3",
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    scheme = url.split(":", 1)[0].lower()
    if scheme not in {"postgres", "postgresql", "sqlite"}:
        raise ImproperlyConfigured(
            f"{name} must be a postgres://, postgresql:// or sqlite:// URL, not {scheme}://"
        )
    pooled = scheme != "sqlite" and env_bool("DB_POOL", True)
    try:
        config = dj_database_url.parse(
            url, conn_max_age=0 if pooled else env_int("DB_CONN_MAX_AGE", 0)
        )
    except Exception as exc:  # dj-database-url raises several types
        raise ImproperlyConfigured(f"{name} is not a valid database URL: {exc}") from None
    # A connection is checked before it is reused after a request: a restarted database
    # costs at most one failed request per process, not one per stale pooled connection.
    config["CONN_HEALTH_CHECKS"] = env_bool("DB_CONN_HEALTH_CHECKS", True)
    if config["ENGINE"].endswith("postgresql"):
        options = config.setdefault("OPTIONS", {})
        options["connect_timeout"] = env_int("DB_CONNECT_TIMEOUT", 5)
        if env_bool("DB_PREPARED_STATEMENTS", True):
            # Parameters bound by the server, and a statement a connection runs again prepared
            # there: PostgreSQL parses and plans it once, not at every request (a decision's
            # seven statements: ~2 ms of planning on a small CPU). Prepared at its second run,
            # not psycopg's fifth: the pool hands its connections round, so at 5 a hot
            # statement waited 5 x the pool's size runs, and a held call's decision measured
            # no gain within 68 decisions (bench/mcp.py's held path: 48.6 ms off, 50.5 at 5,
            # 43.8 at 1, medians of 4 alternated rounds). A statement run once is never
            # prepared; psycopg keeps the 100 latest per connection. Off for a transaction-mode
            # pooler that cannot keep a connection's prepared statements.
            options["server_side_binding"] = True
            options["prepare_threshold"] = env_int("DB_PREPARE_THRESHOLD", 1, minimum=1)
        if pooled:
            # Under ASGI every request runs its sync code in a thread of its own, so a
            # connection per thread (CONN_MAX_AGE) is a connection per request: a new
            # PostgreSQL backend each time (about 11 ms of the server's CPU per ingest batch).
            # A pool per process hands them back and forth instead.
            low = env_int("DB_POOL_MIN", 2, minimum=1)
            options["pool"] = {
                "min_size": low,
                "max_size": env_int("DB_POOL_MAX", 20, minimum=low),
                "timeout": env_int("DB_POOL_TIMEOUT", 10, minimum=1),
            }
    return config


# EMAIL_URL schemes: (TLS, SSL, default port). dj-email-url parses the rest of the URL.
EMAIL_SCHEMES = {
    "smtp": (False, False, 25),
    "smtp+tls": (True, False, 587),
    "smtp+ssl": (False, True, 465),
}


def env_email(name: str) -> dict:
    """Django's EMAIL_* settings from a URL; unset: every mail is written to the server log."""
    url = os.environ.get(name, "").strip()
    if not url:
        return {"EMAIL_BACKEND": "notifications.mail.LogEmailBackend"}
    return email_url_settings(url, name=name)


def email_url_settings(url: str, *, name: str = "EMAIL_URL") -> dict:
    """`smtp://host:port`, `smtp+tls://user:password@host:port`, `smtp+ssl://…` (user and
    password percent-encoded; `?timeout=S`, default 10) → Django's EMAIL_* settings."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in EMAIL_SCHEMES:
        raise ImproperlyConfigured(
            f"{name} must be an smtp://, smtp+tls:// or smtp+ssl:// URL, not {url!r}"
        )
    tls, ssl, default_port = EMAIL_SCHEMES[scheme.lower()]
    try:
        parts = urlsplit(f"smtp://{rest}")
        port = parts.port
        config = dj_email_url.parse(f"smtp://{rest}")
    except ValueError as exc:  # a port that is not a number, a timeout that is not one
        raise ImproperlyConfigured(f"{name} is not a valid mail URL: {exc}") from None
    if not parts.hostname:
        raise ImproperlyConfigured(f"{name} names no mail server host")
    config["EMAIL_USE_TLS"] = config["EMAIL_USE_TLS"] or tls
    config["EMAIL_USE_SSL"] = config["EMAIL_USE_SSL"] or ssl
    if config["EMAIL_USE_TLS"] and config["EMAIL_USE_SSL"]:
        raise ImproperlyConfigured(f"{name} asks for both TLS and SSL: choose one")
    config["EMAIL_PORT"] = port or default_port
    config["EMAIL_TIMEOUT"] = config["EMAIL_TIMEOUT"] or 10
    config["EMAIL_HOST_USER"] = config["EMAIL_HOST_USER"] or ""
    config["EMAIL_HOST_PASSWORD"] = config["EMAIL_HOST_PASSWORD"] or ""
    config.pop("EMAIL_FILE_PATH", None)
    return config


def env_from_email(name: str, default: str) -> str:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if "@" not in parseaddr(raw)[1]:
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a mail address (e.g. gavel@example.com or "
            "'Gavel <gavel@example.com>')"
        )
    return raw


def env_public_url(name: str) -> str:
    """The base of every link the console sends out (mail, webhooks, notifications)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ""
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ImproperlyConfigured(
            f"{name}={raw!r} must be an http:// or https:// address such as https://gavel.example.com"
        )
    return raw.rstrip("/")


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_secret("SECRET_KEY", debug=DEBUG)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # /api/v1/docs: ninja's own templates and bundled Swagger UI (no CDN)
    "django_htmx",
    "template_partials",
    "django_simple_bulma",
    "console",
    "runs",
    "approvals",
    "notifications",
    "budgets",
    "gateway",  # the MCP gateway (/mcp/{name}: gateway/asgi.py)
    "ops",  # health, readiness, metrics, request ids, the worker (ops/__init__.py)
    "retention",  # retention policies, pruning, exports (issue #27)
]

# Django's own middleware through console.middleware: the same classes, with hooks that run on
# the event loop instead of a thread hop each on the async path (see that module).
MIDDLEWARE = [
    # X-Request-Id, request metrics, the request's span. GAVEL_REQUEST_MIDDLEWARE=0 leaves it out
    # (not for production; bench/ops.py measures its cost in one process: bench/_middleware_asgi).
    *(["ops.middleware.RequestMiddleware"] if env_bool("GAVEL_REQUEST_MIDDLEWARE", True) else []),
    "console.middleware.SecurityMiddleware",
    "console.middleware.ContentSecurityPolicyMiddleware",
    "console.middleware.ApiErrorBodyMiddleware",
    "console.middleware.DatabaseUnavailableMiddleware",  # 503 + Retry-After, never a 500
    "console.middleware.AsyncWhiteNoiseMiddleware",  # WhiteNoise, async-capable
    "console.middleware.SessionMiddleware",
    "console.middleware.CommonMiddleware",
    "console.middleware.RequestBaseMiddleware",  # links in mail: the request's address
    "console.middleware.CsrfViewMiddleware",
    "console.middleware.AuthenticationMiddleware",
    "console.middleware.MessageMiddleware",
    "console.middleware.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context_processors.console",
            ],
        },
    }
]

DATABASES = {"default": env_database("DATABASE_URL")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis (optional): the channel layer between processes, and the API keys' shared rate limits
# (console/ratelimit.py). REDIS_PREFIX keeps two consoles on one Redis apart.
REDIS_URL = os.environ.get("REDIS_URL", "").strip()
REDIS_PREFIX = os.environ.get("REDIS_PREFIX", "").strip() or "gavel"
if REDIS_URL:
    if not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
        raise ImproperlyConfigured("REDIS_URL must be a redis://, rediss:// or unix:// URL")
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": REDIS_PREFIX},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# Sign-in names are resolved by console/logins.py (Django's ModelBackend, with `<tenant>/<id>`).
AUTHENTICATION_BACKENDS = ["console.logins.LoginBackend"]
# Django admin (/django-admin/) is the operator's, for staff logins: not routed unless this is on.
GAVEL_DJANGO_ADMIN = env_bool("GAVEL_DJANGO_ADMIN", False)
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/approvals/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 12 * 3600, minimum=60)
SESSION_EXPIRE_AT_BROWSER_CLOSE = False
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "staticfiles"  # written by collectstatic only; WhiteNoise uses finders
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
# Static files are served straight from the finders, so a deployment needs no collectstatic.
WHITENOISE_USE_FINDERS = True
# Bulma comes from django-simple-bulma: its finder compiles the CSS (libsass) when WhiteNoise
# lists the finders at start-up, so there is still no collectstatic step.
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "django_simple_bulma.finders.SimpleBulmaFinder",
]
BULMA_SETTINGS = {"extensions": [], "output_style": "compressed"}
WHITENOISE_AUTOREFRESH = DEBUG

# The API's body limit (the contract's 413 default: 2 MiB), and every other path's (pages,
# sign-in, SCIM, Slack). Both are enforced before a body is read (console/bodylimit.py);
# Django's own check stays behind them.
GAVEL_MAX_BODY_BYTES = env_int("GAVEL_MAX_BODY_BYTES", 2 * 1024 * 1024, minimum=1024)
GAVEL_MAX_FORM_BODY_BYTES = env_int("GAVEL_MAX_FORM_BODY_BYTES", 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = max(GAVEL_MAX_BODY_BYTES, GAVEL_MAX_FORM_BODY_BYTES)
GAVEL_DEFAULT_RATE_PER_MINUTE = env_int("GAVEL_DEFAULT_RATE_PER_MINUTE", 6000, minimum=1)
GAVEL_DEFAULT_RATE_BURST = env_int("GAVEL_DEFAULT_RATE_BURST", 500, minimum=1)
# With Redis: a process keeps the API keys it authenticated (console/directory/keycopies.py),
# used while the keys epoch has not moved (any key, principal or tenant change moves it), and
# for at most this long whatever the epoch says. 0: every request reads its key.
GAVEL_KEY_COPY_SECONDS = env_int("GAVEL_KEY_COPY_SECONDS", 5, minimum=0)
# Statements run straight from a server's event loop on PostgreSQL (console/core/adb.py: the
# long-poll's looks, the MCP gateway's passed calls and claims). Off: through the ORM's pool.
# Per loop and kind (reads and hints; durable writes): at most _MAX connections at once,
# _IDLE kept for good, the others while used in the last 30 s.
GAVEL_ASYNC_READS = env_bool("GAVEL_ASYNC_READS", True)
GAVEL_ASYNC_READS_IDLE = env_int("GAVEL_ASYNC_READS_IDLE", 4, minimum=0)
GAVEL_ASYNC_READS_MAX = env_int("GAVEL_ASYNC_READS_MAX", 8, minimum=1)
# Abuse bounds of one server process (docs/api.md "Limits", docs/realtime.md): open sockets
# per principal and per session (close 4429); held decision long-polls per tenant (429
# beyond); how long a connection may take to send its request's headers, and its body.
GAVEL_WS_MAX_PER_PRINCIPAL = env_int("GAVEL_WS_MAX_PER_PRINCIPAL", 50, minimum=1)
GAVEL_WS_MAX_PER_SESSION = env_int("GAVEL_WS_MAX_PER_SESSION", 30, minimum=1)
GAVEL_LONGPOLL_MAX_PER_TENANT = env_int("GAVEL_LONGPOLL_MAX_PER_TENANT", 200, minimum=1)
GAVEL_HTTP_HEADER_TIMEOUT = env_int("GAVEL_HTTP_HEADER_TIMEOUT", 20, minimum=1)
GAVEL_HTTP_BODY_TIMEOUT = env_int("GAVEL_HTTP_BODY_TIMEOUT", 120, minimum=1)

# Outgoing mail (sent after commit by the outbox thread and the sweep, never in a request).
_EMAIL = env_email("EMAIL_URL")
EMAIL_BACKEND = _EMAIL["EMAIL_BACKEND"]
EMAIL_HOST = _EMAIL.get("EMAIL_HOST") or "localhost"
EMAIL_PORT = _EMAIL.get("EMAIL_PORT") or 25
EMAIL_HOST_USER = _EMAIL.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = _EMAIL.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _EMAIL.get("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = _EMAIL.get("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = _EMAIL.get("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env_from_email("DEFAULT_FROM_EMAIL", "Gavel <gavel@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
# The base of links in mail, webhooks and notifications ("" = the request's address, else
# http://localhost:8000).
GAVEL_PUBLIC_URL = env_public_url("GAVEL_PUBLIC_URL")
# Development and tests only: also accept http:// webhook URLs.
GAVEL_WEBHOOK_ALLOW_HTTP = env_bool("GAVEL_WEBHOOK_ALLOW_HTTP", False)
# Where Slack's `response_url` of a button press may point (the updated message is POSTed
# there): Slack's own host; tests point it at a local server.
GAVEL_SLACK_RESPONSE_URL_PREFIX = "https://hooks.slack.com/"
# Development and tests only: also accept an http:// OpenID Connect issuer.
GAVEL_OIDC_ALLOW_HTTP = env_bool("GAVEL_OIDC_ALLOW_HTTP", False)
# Outbound HTTP to addresses others chose (webhooks, Slack's response_url, OpenID
# providers; console/outbound.py): a total deadline per request (under the outbox's 60 s
# lease), a cap on an answer's body, a pool of senders per process and at most this many
# requests of one tenant in flight in it.
GAVEL_OUTBOUND_DEADLINE_SECONDS = env_int("GAVEL_OUTBOUND_DEADLINE_SECONDS", 10, minimum=1)
if GAVEL_OUTBOUND_DEADLINE_SECONDS > 50:
    raise ImproperlyConfigured(
        f"GAVEL_OUTBOUND_DEADLINE_SECONDS={GAVEL_OUTBOUND_DEADLINE_SECONDS} must be <= 50 "
        "(a delivery's lease is 60 s)"
    )
GAVEL_OUTBOUND_MAX_RESPONSE_BYTES = env_int(
    "GAVEL_OUTBOUND_MAX_RESPONSE_BYTES", 1024 * 1024, minimum=1024
)
GAVEL_OUTBOUND_WORKERS = env_int("GAVEL_OUTBOUND_WORKERS", 8, minimum=1)
GAVEL_OUTBOUND_PER_TENANT = env_int("GAVEL_OUTBOUND_PER_TENANT", 4, minimum=1)
# Development and tests only: outbound requests may go to loopback (127.0.0.0/8, ::1,
# localhost; never private or link-local ranges). GAVEL_WEBHOOK_ALLOW_HTTP allows it for
# webhooks and Slack responses, GAVEL_OIDC_ALLOW_HTTP for OpenID providers.
GAVEL_OUTBOUND_ALLOW_LOOPBACK = env_bool("GAVEL_OUTBOUND_ALLOW_LOOPBACK", False)
# The MCP gateway (docs/mcp.md): http:// upstreams (and loopback) only for development and
# tests; progress notifications to a waiting client at least this often (the contract: 15 s);
# each upstream request bounded by this deadline.
GAVEL_MCP_ALLOW_HTTP = env_bool("GAVEL_MCP_ALLOW_HTTP", False)
GAVEL_MCP_PROGRESS_SECONDS = env_int("GAVEL_MCP_PROGRESS_SECONDS", 10, minimum=1)
GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS = env_int("GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS", 60, minimum=1)
# An MCP session with no request for this long is closed (its run finished unless a call of it
# still waits for a decision): docs/mcp.md.
GAVEL_MCP_SESSION_IDLE_SECONDS = env_int("GAVEL_MCP_SESSION_IDLE_SECONDS", 1800, minimum=10)
# How long a server process trusts its copy of a key's and a server's row at the gateway's edge
# (a revoke, a deactivation or a disabled server is seen at once by the process that made it).
GAVEL_MCP_CACHE_SECONDS = env_int("GAVEL_MCP_CACHE_SECONDS", 5, minimum=0)
# An audit entry is sealed into its tenant's hash chain this long after its commit, off the
# request's path, with the tenant's other commits of the moment (PostgreSQL; 0: right after
# the commit, in the committing thread, as on SQLite). The sweep seals what a stopped process
# left: docs/architecture.md, "The audit log".
GAVEL_AUDIT_SEAL_DELAY_MS = env_int("GAVEL_AUDIT_SEAL_DELAY_MS", 100, minimum=0)
# The key that encrypts stored secrets (a tenant's OIDC client secret): a Fernet key
# (32 url-safe base64 bytes); unset, one is derived from SECRET_KEY (console/crypto.py).
GAVEL_ENCRYPTION_KEY = os.environ.get("GAVEL_ENCRYPTION_KEY", "")
# The secret the audit log's keys are derived from (the chain's HMAC, the writer's tag, the
# checkpoints' Ed25519 key: console/auditchain.py); unset, SECRET_KEY. Never in the database.
GAVEL_AUDIT_KEY = env_key("GAVEL_AUDIT_KEY", min_length=32)

# Sign-in protection (the contract's numbers): 5 failures for one account or 20 from one
# address within the window lock it for the lockout period.
GAVEL_SIGNIN_ACCOUNT_FAILURES = 5
GAVEL_SIGNIN_ADDRESS_FAILURES = 20
GAVEL_SIGNIN_WINDOW_SECONDS = 15 * 60
GAVEL_SIGNIN_LOCKOUT_SECONDS = 15 * 60
# Sensitive browser actions ask for the password again when the session proved it longer ago.
GAVEL_REAUTH_SECONDS = 15 * 60
# How many proxies (load balancers) in front of the app append to X-Forwarded-For; 0: the
# client's address is REMOTE_ADDR and X-Forwarded-For is not read at all.
GAVEL_TRUSTED_PROXIES = env_int("GAVEL_TRUSTED_PROXIES", 0)
# Trust by address (issue 27): X-Forwarded-For is read only from a peer inside these networks
# (the load balancers), and the client is its rightmost entry outside them. When set, it
# replaces the count above, so a server reached directly cannot be told a forged address.
GAVEL_TRUSTED_PROXY_CIDRS = env_cidrs("GAVEL_TRUSTED_PROXY_CIDRS")

# Production hardening. TLS ends at the load balancer, which sets X-Forwarded-Proto.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
CSRF_COOKIE_HTTPONLY = True
if not DEBUG:
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
# The app never redirects to https itself: the load balancer terminates TLS. W001-W003 look
# for Django's middleware by its dotted path; the same classes are listed under
# console.middleware, and console/checks.py checks for those instead (gavel.W001-W003).
SILENCED_SYSTEM_CHECKS = ["security.W008", "security.W001", "security.W002", "security.W003"]

# JSON lines with time, level, logger and the request's id; secrets redacted (ops/logs.py).
LOGGING = ops_logs.config(
    level=os.environ.get("LOG_LEVEL", "INFO"),
    fmt=os.environ.get("LOG_FORMAT", "json").strip().lower() or "json",
)

# Operations (ops/): /metrics answers only `Authorization: Bearer <GAVEL_METRICS_TOKEN>` (unset:
# 404); /readyz fails when no worker has finished a pass for GAVEL_WORKER_STALE_SECONDS.
GAVEL_METRICS_TOKEN = os.environ.get("GAVEL_METRICS_TOKEN", "").strip()
GAVEL_WORKER_STALE_SECONDS = env_int("GAVEL_WORKER_STALE_SECONDS", 60, minimum=5)
# SIGTERM: how long a server waits for its requests in flight before cancelling them (daphne
# then exits; keep it under the 10 s an orchestrator allows).
GAVEL_SHUTDOWN_GRACE_SECONDS = env_int("GAVEL_SHUTDOWN_GRACE_SECONDS", 7, minimum=0)
