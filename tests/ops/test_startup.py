"""What a process imports when it starts: every manage.py command (the worker, the sweep, the
demo agent) and every server pays its imports at each start (a restart, a rolling deploy, a
test's server). The `mcp` SDK is imported only by a process that serves the gateway, and
SCIM's models only at a process's first SCIM request; a SCIM request still works, without
CSRF (its client authenticates with a key), and the API's schema is built once per process."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from tests.support.factories import make_key
from tests.support.scim import Scim

ROOT = Path(__file__).resolve().parents[2]


def _imported_after(code: str) -> set[str]:
    """The top-level modules a fresh interpreter holds after Django's setup and `code`."""
    script = (
        "import json, sys, django; django.setup(); "
        f"{code}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    )
    env = {"DJANGO_SETTINGS_MODULE": "console.settings", "SECRET_KEY": "x", "PATH": "/usr/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_django_setup_imports_no_mcp_and_no_scim():
    modules = _imported_after("pass")
    assert "django" in modules and "gateway" in modules  # the app is loaded
    assert "mcp" not in modules and "scim2_models" not in modules


def test_the_urlconf_imports_no_scim_models_and_the_server_its_gateway():
    urls = _imported_after("import console.urls")
    assert "scim2_models" not in urls
    served = _imported_after("import console.asgi")
    assert "mcp" in served  # a server imports the gateway when it starts, not at a call


@pytest.mark.django_db
def test_a_scim_request_loads_its_views_and_needs_no_csrf_token(tenant_a, admin_a):
    client = Client(enforce_csrf_checks=True)  # as a browser's session would be checked
    scim = Scim(client, make_key(tenant_a, scopes=("scim",)))
    created = scim.send("post", "/Users", {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "csrf@a.example",
    })  # fmt: skip
    assert created.status_code == 201, created.content
    assert scim.get("/Users/csrf@a.example").json()["userName"] == "csrf@a.example"
    assert scim.get("/NoSuchThing").status_code == 404  # the catch-all view, loaded lazily


def test_the_api_schema_is_built_once_and_each_caller_gets_its_own_copy(monkeypatch):
    from console.api import api

    first = api.get_openapi_schema(path_prefix="/api/v1")
    built = []
    monkeypatch.setattr(type(api), "_built_schema", lambda *a: built.append(a) or {})
    second = api.get_openapi_schema(path_prefix="/api/v1")
    assert built == [] and second == first and second is not first
    second["paths"].clear()  # a caller's change is its own
    assert api.get_openapi_schema(path_prefix="/api/v1")["paths"] == first["paths"] != {}
    api.get_openapi_schema(path_prefix="/other/")  # another prefix is built for itself
    assert len(built) == 1
