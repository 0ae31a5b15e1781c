"""`manage.py check --deploy`: each misconfiguration the operations audit found running
Gavel as a production deployment would (OPS_AUDIT §4, issue 27). All are warnings naming the
variable that fixes them; with a production environment (docs/operations.md) none fires."""

from django.conf import settings
from django.core import checks

HSTS_MIN = 180 * 24 * 3600  # what browsers' preload lists ask for at least
LOG_MAIL = ("LogEmailBackend", "console.EmailBackend", "locmem.EmailBackend", "dummy.EmailBackend")
CIDRS_HINT = "Set GAVEL_TRUSTED_PROXY_CIDRS to the load balancers' networks."


def _findings() -> list[tuple[int, str, str]]:
    """(number, what is wrong, how to fix it) for each misconfiguration present."""
    found = []
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        found.append((
            1,
            "the database is the embedded SQLite file (DATABASE_URL is unset): one process "
            "only, and its data is lost with the disk.",
            "Set DATABASE_URL=postgres://... (PostgreSQL).",
        ))  # fmt: skip
    if settings.CHANNEL_LAYERS["default"]["BACKEND"].endswith("InMemoryChannelLayer"):
        found.append((
            2,
            "REDIS_URL is unset: the channel layer is in-process, so with several servers a "
            "browser on one never sees what another ingested, and rate limits count per "
            "process.",
            "Set REDIS_URL=redis://... shared by every server and the worker.",
        ))  # fmt: skip
    if settings.EMAIL_BACKEND.endswith(LOG_MAIL):
        found.append((
            3,
            "EMAIL_URL is unset: mail is written to the log (nothing is delivered, and mail "
            "bodies land in the logs).",
            "Set EMAIL_URL=smtp://..., smtp+tls://... or smtp+ssl://....",
        ))  # fmt: skip
    if not getattr(settings, "GAVEL_PUBLIC_URL", ""):
        found.append((
            4,
            "GAVEL_PUBLIC_URL is unset: the mail, Slack messages and webhooks the worker "
            "writes link to http://localhost:8000.",
            "Set GAVEL_PUBLIC_URL=https://gavel.example.com (the address people open).",
        ))  # fmt: skip
    if settings.SECURE_HSTS_SECONDS < HSTS_MIN:
        found.append((
            5,
            f"SECURE_HSTS_SECONDS is {settings.SECURE_HSTS_SECONDS}: browsers may be sent to "
            "plain http.",
            f"Leave SECURE_HSTS_SECONDS unset (a year) or set it to at least {HSTS_MIN}.",
        ))  # fmt: skip
    cidrs = settings.GAVEL_TRUSTED_PROXY_CIDRS
    if settings.GAVEL_TRUSTED_PROXIES and not cidrs:
        found.append((
            6,
            "GAVEL_TRUSTED_PROXIES trusts X-Forwarded-For by count: a client that reaches a "
            "server directly can put any address in the audit log and the sign-in lockout.",
            CIDRS_HINT,
        ))  # fmt: skip
    elif not cidrs:
        found.append((
            7,
            "no proxy is trusted: behind a load balancer every client has the balancer's "
            "address, so 20 failed sign-ins by anyone lock sign-in by address for everyone.",
            CIDRS_HINT + " (127.0.0.1/32 for a proxy on the same host)",
        ))  # fmt: skip
    for name in ("GAVEL_WEBHOOK_ALLOW_HTTP", "GAVEL_OIDC_ALLOW_HTTP"):
        if getattr(settings, name, False):
            found.append((8, f"{name} is on: a development flag.", f"Unset {name}."))
    return found


@checks.register(checks.Tags.security, deploy=True)
def deployment_settings(app_configs, **kwargs):
    return [
        checks.Warning(message, hint=hint, id=f"gavel.W1{number:02d}")
        for number, message, hint in _findings()
    ]
