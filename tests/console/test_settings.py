"""console/settings.py: env parsing that fails loudly, and production settings that pass
`manage.py check --deploy` with nothing to say."""

import importlib
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.support.settings_env import DEPLOYED_ENV, PRODUCTION_ENV, ROOT, manage  # noqa: F401


@pytest.fixture
def load_settings(monkeypatch, tmp_path):
    """Re-execute console/settings.py under a given environment; restore it afterwards."""
    import console.settings as module

    for name in ("DEBUG", "SECRET_KEY", "DATABASE_URL", "ALLOWED_HOSTS", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GAVEL_VAR_DIR", str(tmp_path))

    def load(**env):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return importlib.reload(module)

    yield load
    monkeypatch.undo()
    importlib.reload(module)


@pytest.mark.parametrize("value", ["1", "true", "yes", "on", "TRUE", " On "])
def test_debug_is_on_only_for_the_true_words(load_settings, value):
    assert load_settings(DEBUG=value).DEBUG is True


@pytest.mark.parametrize("value", ["0", "false", "no", "off", "", "OFF"])
def test_debug_is_off_for_the_false_words(load_settings, value):
    assert load_settings(DEBUG=value, SECRET_KEY="s").DEBUG is False


def test_debug_is_off_when_unset(load_settings):
    assert load_settings(SECRET_KEY="s").DEBUG is False


@pytest.mark.parametrize("value", ["maybe", "2", "enabled"])
def test_a_bad_debug_value_stops_start_up_naming_the_variable(load_settings, value):
    with pytest.raises(ImproperlyConfigured, match=r"DEBUG="):
        load_settings(DEBUG=value, SECRET_KEY="s")


def test_secret_key_is_required_with_debug_off(load_settings):
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY is required"):
        load_settings(DEBUG="0")


def test_with_debug_on_a_dev_secret_key_is_generated_once_into_var(load_settings, tmp_path):
    first = load_settings(DEBUG="1").SECRET_KEY
    assert first and (tmp_path / "dev-secret-key").read_text().strip() == first
    assert first == load_settings(DEBUG="1").SECRET_KEY


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_database_url_accepts_both_postgres_schemes(load_settings, scheme):
    url = f"{scheme}://gavel:pw@db.internal:5433/gavel_prod"
    db = load_settings(SECRET_KEY="s", DATABASE_URL=url).DATABASES["default"]
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["HOST"], db["PORT"], db["USER"]) == (
        "gavel_prod",
        "db.internal",
        5433,
        "gavel",
    )


def test_postgresql_connections_come_from_a_pool_by_default(load_settings, monkeypatch):
    for name in ("DB_POOL", "DB_POOL_MIN", "DB_POOL_MAX", "DB_POOL_TIMEOUT", "DB_CONN_MAX_AGE"):
        monkeypatch.delenv(name, raising=False)
    url = "postgres://gavel@db.internal/gavel"
    db = load_settings(SECRET_KEY="s", DATABASE_URL=url).DATABASES["default"]
    assert db["OPTIONS"]["pool"] == {"min_size": 2, "max_size": 20, "timeout": 10}
    assert db["CONN_MAX_AGE"] == 0  # Django's pool hands connections back after each request
    db = load_settings(DB_POOL_MIN="4", DB_POOL_MAX="8").DATABASES["default"]
    assert db["OPTIONS"]["pool"]["min_size"] == 4 and db["OPTIONS"]["pool"]["max_size"] == 8
    db = load_settings(DB_POOL="off", DB_CONN_MAX_AGE="60").DATABASES["default"]
    assert "pool" not in db["OPTIONS"] and db["CONN_MAX_AGE"] == 60


def test_postgresql_statements_are_prepared_by_default(load_settings, monkeypatch):
    for name in ("DB_PREPARED_STATEMENTS", "DB_PREPARE_THRESHOLD"):
        monkeypatch.delenv(name, raising=False)
    url = "postgres://gavel@db.internal/gavel"
    options = load_settings(SECRET_KEY="s", DATABASE_URL=url).DATABASES["default"]["OPTIONS"]
    assert options["server_side_binding"] is True and options["prepare_threshold"] == 1
    options = load_settings(DB_PREPARE_THRESHOLD="5").DATABASES["default"]["OPTIONS"]
    assert options["prepare_threshold"] == 5
    # Off (a transaction-mode pooler): Django's own default, client-side binding, no prepare.
    options = load_settings(DB_PREPARED_STATEMENTS="0").DATABASES["default"]["OPTIONS"]
    assert "server_side_binding" not in options and "prepare_threshold" not in options


@pytest.mark.parametrize(
    ("name", "value"), [("DB_PREPARED_STATEMENTS", "maybe"), ("DB_PREPARE_THRESHOLD", "0")]
)
def test_a_bad_prepared_statements_setting_names_the_variable(load_settings, name, value):
    url = "postgres://gavel@db.internal/gavel"
    with pytest.raises(ImproperlyConfigured, match=name):
        load_settings(SECRET_KEY="s", DATABASE_URL=url, **{name: value})


@pytest.mark.parametrize(
    ("name", "value"), [("DB_POOL", "maybe"), ("DB_POOL_MIN", "0"), ("DB_POOL_MAX", "1")]
)
def test_a_bad_pool_setting_names_the_variable(load_settings, monkeypatch, name, value):
    monkeypatch.setenv("DB_POOL_MIN", "2")  # a max below the min is refused too
    url = "postgres://gavel@db.internal/gavel"
    with pytest.raises(ImproperlyConfigured, match=name):
        load_settings(SECRET_KEY="s", DATABASE_URL=url, **{name: value})


def test_unset_database_url_is_sqlite_under_var(load_settings, tmp_path):
    db = load_settings(SECRET_KEY="s").DATABASES["default"]
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert Path(db["NAME"]).parent == tmp_path


def test_an_unsupported_database_url_names_the_variable(load_settings):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        load_settings(SECRET_KEY="s", DATABASE_URL="mysql://u@h/db")


def test_production_cookies_and_hsts(load_settings):
    settings = load_settings(**PRODUCTION_ENV)
    assert settings.SESSION_COOKIE_SECURE and settings.CSRF_COOKIE_SECURE
    assert settings.SESSION_COOKIE_HTTPONLY
    assert settings.SECURE_HSTS_SECONDS >= 31536000
    assert settings.SECURE_PROXY_SSL_HEADER == ("HTTP_X_FORWARDED_PROTO", "https")
    assert settings.ALLOWED_HOSTS == ["gavel.example.com"]


def test_check_deploy_with_production_env_prints_no_warnings(tmp_path):
    done = manage("check", "--deploy", env={**DEPLOYED_ENV, "GAVEL_VAR_DIR": str(tmp_path)})
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "WARNING" not in output.upper(), output
    assert "System check identified no issues (3 silenced)." in output  # W001-W003: our checks


def test_our_security_middleware_checks_replace_djangos_by_dotted_path(settings):
    """Django's W001-W003 look for its own dotted paths; ours look for console.middleware."""
    from console.checks import middleware_present

    assert middleware_present(None) == []
    settings.MIDDLEWARE = [
        m for m in settings.MIDDLEWARE if m != "console.middleware.XFrameOptionsMiddleware"
    ]
    assert [w.id for w in middleware_present(None)] == ["gavel.W002"]


def test_a_bad_debug_value_stops_manage_py_naming_the_variable(tmp_path):
    done = manage("check", env={"DEBUG": "perhaps", "GAVEL_VAR_DIR": str(tmp_path)})
    assert done.returncode != 0
    assert "DEBUG='perhaps' is not a boolean" in done.stderr


def test_mail_goes_to_the_log_when_email_url_is_unset(load_settings, monkeypatch):
    monkeypatch.delenv("EMAIL_URL", raising=False)
    settings = load_settings(DEBUG="1")
    assert settings.EMAIL_BACKEND == "notifications.mail.LogEmailBackend"
    assert settings.DEFAULT_FROM_EMAIL == "Gavel <gavel@localhost>"
    assert settings.GAVEL_PUBLIC_URL == "" and settings.GAVEL_WEBHOOK_ALLOW_HTTP is False


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://mail.example:2525", {"EMAIL_HOST": "mail.example", "EMAIL_PORT": 2525}),
        ("smtp://mail.example", {"EMAIL_PORT": 25, "EMAIL_USE_TLS": False}),
        (
            "smtp+tls://bot%40example.com:p%40ss@mail.example",
            {
                "EMAIL_PORT": 587,
                "EMAIL_USE_TLS": True,
                "EMAIL_USE_SSL": False,
                "EMAIL_HOST_USER": "bot@example.com",
                "EMAIL_HOST_PASSWORD": "p@ss",
            },
        ),
        ("smtp+ssl://u:p@mail.example:4650", {"EMAIL_PORT": 4650, "EMAIL_USE_SSL": True}),
        ("smtp+ssl://mail.example?timeout=3", {"EMAIL_PORT": 465, "EMAIL_TIMEOUT": 3}),
    ],
)
def test_email_url_configures_django_mail(load_settings, url, expected):
    settings = load_settings(DEBUG="1", EMAIL_URL=url)
    assert settings.EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend"
    for name, value in expected.items():
        assert getattr(settings, name) == value, name
    assert settings.EMAIL_TIMEOUT == expected.get("EMAIL_TIMEOUT", 10)  # noqa: SIM300


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("EMAIL_URL", "http://mail.example"),
        ("EMAIL_URL", "mail.example:25"),
        ("EMAIL_URL", "smtp://mail.example:notaport"),
        ("EMAIL_URL", "smtp://"),
        ("EMAIL_URL", "smtp+tls://mail.example?ssl=1"),
        ("DEFAULT_FROM_EMAIL", "not an address"),
        ("GAVEL_PUBLIC_URL", "gavel.example.com"),
        ("GAVEL_PUBLIC_URL", "ftp://gavel.example.com"),
        ("GAVEL_WEBHOOK_ALLOW_HTTP", "perhaps"),
    ],
)
def test_bad_mail_and_link_settings_stop_start_up_naming_the_variable(load_settings, name, value):
    with pytest.raises(ImproperlyConfigured, match=name):
        load_settings(DEBUG="1", **{name: value})


def test_public_url_and_sender(load_settings):
    settings = load_settings(
        DEBUG="1",
        GAVEL_PUBLIC_URL="https://gavel.example.com/",
        DEFAULT_FROM_EMAIL="Gavel <alerts@gavel.example.com>",
        GAVEL_WEBHOOK_ALLOW_HTTP="1",
    )
    assert settings.GAVEL_PUBLIC_URL == "https://gavel.example.com"
    assert settings.DEFAULT_FROM_EMAIL == "Gavel <alerts@gavel.example.com>"
    assert settings.GAVEL_WEBHOOK_ALLOW_HTTP is True
