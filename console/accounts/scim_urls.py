"""SCIM 2.0's routes (console/accounts/scim.py's views), loaded at a process's first SCIM
request: scim2_models and the SCIM schemas are ~1.8 s of imports on a slow core, which every
server start and every test server paid for an endpoint only an identity provider calls."""

from importlib import import_module

from django.urls import path
from django.views.decorators.csrf import csrf_exempt

VIEWS = "console.accounts.scim"


def _view(name: str):
    """The view `name` of VIEWS, imported when it is first asked for (CSRF-exempt like it:
    a SCIM client authenticates with its key, never a session)."""

    @csrf_exempt
    def view(request, *args, **kwargs):
        return getattr(import_module(VIEWS), name)(request, *args, **kwargs)

    view.__name__ = view.__qualname__ = name
    view.__module__ = VIEWS
    return view


urlpatterns = [
    path("scim/v2/ServiceProviderConfig", _view("service_provider_config")),
    path("scim/v2/ResourceTypes", _view("resource_types")),
    path("scim/v2/ResourceTypes/<str:name>", _view("resource_types")),
    path("scim/v2/Schemas", _view("schemas")),
    path("scim/v2/Schemas/<str:urn>", _view("schemas")),
    path("scim/v2/.search", _view("root_search")),
    path("scim/v2/Users", _view("users")),
    path("scim/v2/Users/.search", _view("users_search")),
    path("scim/v2/Users/<str:user_id>", _view("user")),
    path("scim/v2/Groups", _view("groups")),
    path("scim/v2/Groups/.search", _view("groups_search")),
    path("scim/v2/Groups/<str:group_id>", _view("group")),
    path("scim/v2/<path:rest>", _view("unknown")),
]
