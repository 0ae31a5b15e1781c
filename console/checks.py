"""System checks of our own.

Django's security checks W001/W002/W003 look for its middleware by dotted path; Gavel lists the
same classes under `console.middleware` (their hooks run on the event loop, see that module),
so those three are silenced in settings and checked here instead, under the same conditions.
"""

from django.conf import settings
from django.core import checks

REQUIRED = {
    "console.middleware.SecurityMiddleware": "HSTS, nosniff, the referrer policy and COOP",
    "console.middleware.XFrameOptionsMiddleware": "X-Frame-Options (clickjacking)",
    "console.middleware.CsrfViewMiddleware": "CSRF protection",
}


@checks.register(checks.Tags.security, deploy=True)
def middleware_present(app_configs, **kwargs):
    return [
        checks.Warning(
            f"{path} is not in MIDDLEWARE: no {what}.",
            id=f"gavel.W00{i}",
        )
        for i, (path, what) in enumerate(REQUIRED.items(), start=1)
        if path not in settings.MIDDLEWARE
    ]
