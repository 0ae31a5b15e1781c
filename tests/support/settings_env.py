"""The environments of a production and a fully deployed console, and `manage.py` run under
one (tests/console/test_settings.py, tests/deploy/test_deploy_checks.py)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "DEBUG": "off",
    "SECRET_KEY": "k3Y-" + "x7Qz9pLm2Vb8Nc4Rt6Wy1Ua5Se3Dg0Hj" * 2,
    "ALLOWED_HOSTS": "gavel.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://gavel.example.com",
}
# ... and what a deployment adds, so `check --deploy` has nothing to say (console/deploy_checks).
DEPLOYED_ENV = {
    **PRODUCTION_ENV,
    "DATABASE_URL": "postgres://gavel@db.internal:5432/gavel",
    "REDIS_URL": "redis://redis.internal:6379/0",
    "EMAIL_URL": "smtp+tls://mailer:secret@smtp.internal:587",
    "GAVEL_PUBLIC_URL": "https://gavel.example.com",
    "GAVEL_TRUSTED_PROXY_CIDRS": "10.0.0.0/24",
}


def manage(*args, env):
    clean = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY")}
    clean.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
