"""`manage.py check --deploy` names each misconfiguration of OPS_AUDIT §4 (SQLite, no
Redis, mail to the log, no GAVEL_PUBLIC_URL, HSTS 0, proxy trust by count or none,
development flags), and says nothing with a deployment's environment."""

import pytest

from console.deploy_checks import deployment_settings
from tests.support.settings_env import DEPLOYED_ENV, manage


@pytest.fixture
def deployed(settings):
    settings.DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql"}}
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer"}
    }
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.GAVEL_PUBLIC_URL = "https://gavel.example.com"
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.GAVEL_TRUSTED_PROXIES = 0
    import ipaddress

    settings.GAVEL_TRUSTED_PROXY_CIDRS = (ipaddress.ip_network("10.0.0.0/24"),)
    settings.GAVEL_WEBHOOK_ALLOW_HTTP = settings.GAVEL_OIDC_ALLOW_HTTP = False
    return settings


def test_a_deployment_has_nothing_to_fix(deployed):
    assert deployment_settings(None) == []


@pytest.mark.parametrize(
    ("change", "expected", "says"),
    [
        (
            {"DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3"}}},
            "gavel.W101",
            "SQLite",
        ),
        (
            {"CHANNEL_LAYERS": {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}},
            "gavel.W102",
            "REDIS_URL",
        ),
        ({"EMAIL_BACKEND": "notifications.mail.LogEmailBackend"}, "gavel.W103", "EMAIL_URL"),
        ({"GAVEL_PUBLIC_URL": ""}, "gavel.W104", "localhost:8000"),
        ({"SECURE_HSTS_SECONDS": 0}, "gavel.W105", "SECURE_HSTS_SECONDS is 0"),
        ({"GAVEL_TRUSTED_PROXIES": 1, "GAVEL_TRUSTED_PROXY_CIDRS": ()}, "gavel.W106", "by count"),
        ({"GAVEL_TRUSTED_PROXY_CIDRS": ()}, "gavel.W107", "no proxy is trusted"),
        ({"GAVEL_WEBHOOK_ALLOW_HTTP": True}, "gavel.W108", "GAVEL_WEBHOOK_ALLOW_HTTP"),
    ],
)
def test_each_misconfiguration_is_named(deployed, change, expected, says):
    for name, value in change.items():
        setattr(deployed, name, value)
    warnings = deployment_settings(None)
    assert [w.id for w in warnings] == [expected]
    assert says in warnings[0].msg and warnings[0].hint


def test_the_audits_environment_gets_every_warning_from_the_command(tmp_path):
    """OPS_AUDIT §4: no DATABASE_URL, REDIS_URL, EMAIL_URL or GAVEL_PUBLIC_URL, proxies by
    count, HSTS 0: `check --deploy` was clean; now it names each."""
    env = {
        k: v
        for k, v in DEPLOYED_ENV.items()
        if k
        not in (
            "DATABASE_URL",
            "REDIS_URL",
            "EMAIL_URL",
            "GAVEL_PUBLIC_URL",
            "GAVEL_TRUSTED_PROXY_CIDRS",
        )
    }
    env.update(GAVEL_VAR_DIR=str(tmp_path), SECURE_HSTS_SECONDS="0", GAVEL_TRUSTED_PROXIES="1")
    for name in ("DATABASE_URL", "REDIS_URL", "EMAIL_URL", "GAVEL_PUBLIC_URL"):
        env[name] = ""
    done = manage("check", "--deploy", env=env)
    output = done.stdout + done.stderr
    for number in (1, 2, 3, 4, 5, 6):
        assert f"gavel.W10{number}" in output, output
    assert "gavel.W107" not in output
