"""SCIM 2.0 at /scim/v2/ (read side): `scim` keys of one tenant see its principals (Users)
and teams (Groups) and nothing of another tenant's; scim2-models' filters (eq, sw, co, pr,
and), sorting, pagination, `attributes` / `excludedAttributes`, POST .search, the discovery
endpoints and the narrowed schemas they publish, SCIM's error shape for every refusal; and
every one of scim2-tester's compliance checks."""

from collections import Counter

import pytest
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from scim2_client.engines.wsgi import WSGISCIMClient
from scim2_tester import Status, check_server

from console.core.errors import Invalid
from console.directory.services import api_key_create
from console.models import Team
from tests.support.factories import PrincipalFactory, make_key
from tests.support.scim import ERROR, Scim

LIST = "urn:ietf:params:scim:api:messages:2.0:ListResponse"


@pytest.fixture
def people_a(tenant_a):
    support = Team.objects.create(tenant=tenant_a, name="support")
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@a.example", name="Alice Liddell")
    alice.email = "alice@a.example"
    alice.save()
    alice.teams.add(support)
    PrincipalFactory(tenant=tenant_a, external_id="bob@a.example", name="")
    PrincipalFactory(
        tenant=tenant_a, external_id="albert@a.example", name="Albert", is_active=False
    )
    return support


@pytest.fixture
def scim_a(client, tenant_a):
    return Scim(client, make_key(tenant_a, scopes=("scim",)))


@pytest.fixture
def scim_b(client, tenant_b):
    PrincipalFactory(tenant=tenant_b, external_id="bert@b.example")
    return Scim(client, make_key(tenant_b, scopes=("scim",)))


def _ids(response):
    body = response.json()
    assert body["schemas"] == [LIST]
    return [r["id"] for r in body["Resources"]]


def test_no_key_or_a_wrong_one_is_a_401_in_scims_shape(client, tenant_a):
    for key in (None, "gvl_wrong"):
        response = Scim(client, key).get("/Users")
        assert response.status_code == 401
        assert response["Content-Type"] == "application/scim+json"
        assert response.json()["schemas"] == [ERROR] and response.json()["status"] == "401"


def test_a_key_without_the_scim_scope_is_a_403(client, tenant_a):
    response = Scim(client, make_key(tenant_a, scopes=("ingest",))).get("/Users")
    assert response.status_code == 403 and response.json()["schemas"] == [ERROR]


def test_a_scim_key_is_bound_to_no_principal(tenant_a, admin_a):
    with pytest.raises(Invalid):
        api_key_create(tenant=tenant_a, name="idp", scopes=["scim"], principal=admin_a)


def test_users_are_the_tenants_principals_and_no_one_elses(scim_a, scim_b, people_a):
    response = scim_a.get("/Users")
    assert response.status_code == 200
    assert set(_ids(response)) >= {"alice@a.example", "bob@a.example", "albert@a.example"}
    assert "bert@b.example" not in _ids(response)
    assert _ids(scim_b.get("/Users")) == ["bert@b.example"]
    alice = scim_a.get("/Users/alice@a.example").json()
    assert alice["userName"] == "alice@a.example" and alice["active"] is True
    assert alice["emails"] == [{"value": "alice@a.example", "type": "work"}]
    assert alice["name"] == {"formatted": "Alice Liddell"}
    assert alice["groups"][0]["value"] == "support"
    assert alice["meta"]["resourceType"] == "User"
    assert alice["meta"]["location"].endswith("/scim/v2/Users/alice@a.example")
    assert scim_a.get("/Users/albert@a.example").json()["active"] is False


def test_another_tenants_user_or_group_is_a_404_like_a_missing_one(scim_a, scim_b, people_a):
    for path in ("/Users/alice@a.example", "/Groups/support"):
        response = scim_b.get(path)
        assert response.status_code == 404 and response.json()["schemas"] == [ERROR]
        assert "alice" not in response.json()["detail"] or path.startswith("/Users")
    assert scim_b.get("/Users/nobody").json()["detail"] == "no user 'nobody'"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('userName eq "ALICE@a.example"', {"alice@a.example"}),
        ('userName sw "al"', {"alice@a.example", "albert@a.example"}),
        ('emails.value co "@a.exa"', {"alice@a.example"}),
        ("displayName pr", {"alice@a.example", "albert@a.example"}),
        ('userName sw "al" and active eq true', {"alice@a.example"}),
    ],
)
def test_filters(scim_a, people_a, expression, expected):
    response = scim_a.get("/Users", filter=expression)
    assert response.status_code == 200, response.content
    assert set(_ids(response)) == expected
    assert response.json()["totalResults"] == len(expected)


def test_a_bad_filter_is_a_400_invalid_filter(scim_a, people_a):
    response = scim_a.get("/Users", filter="userName eq")
    assert response.status_code == 400
    assert response.json()["scimType"] == "invalidFilter"


def test_pages_by_start_index_and_count(scim_a, people_a):
    everyone = _ids(scim_a.get("/Users"))
    page = scim_a.get("/Users", startIndex=2, count=1).json()
    assert page["totalResults"] == len(everyone) and page["startIndex"] == 2
    assert page["itemsPerPage"] == 1 and page["Resources"][0]["id"] == everyone[1]
    assert scim_a.get("/Users", count=0).json()["Resources"] == []
    assert scim_a.get("/Users", startIndex=0).json()["startIndex"] == 1


def test_groups_are_teams_with_their_members(scim_a, people_a):
    assert _ids(scim_a.get("/Groups")) == ["support"]
    group = scim_a.get("/Groups/support").json()
    assert group["displayName"] == "support"
    assert [m["value"] for m in group["members"]] == ["alice@a.example"]
    assert _ids(scim_a.get("/Groups", filter='displayName eq "support"')) == ["support"]


def test_discovery_endpoints(scim_a):
    config = scim_a.get("/ServiceProviderConfig").json()
    assert config["filter"] == {"supported": True, "maxResults": 200}
    assert {r["id"] for r in scim_a.get("/ResourceTypes").json()["Resources"]} == {
        "User",
        "Group",
    }
    assert scim_a.get("/ResourceTypes/User").json()["endpoint"] == "/Users"
    schema_ids = {s["id"] for s in scim_a.get("/Schemas").json()["Resources"]}
    assert "urn:ietf:params:scim:schemas:core:2.0:User" in schema_ids
    assert scim_a.get("/Schemas/urn:nope").status_code == 404
    assert scim_a.get("/Nope").status_code == 404


USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
SEARCH = "urn:ietf:params:scim:api:messages:2.0:SearchRequest"


def _attributes(schema):
    return {
        a["name"]: {s["name"] for s in a.get("subAttributes", [])} for a in schema["attributes"]
    }


def test_the_served_schemas_hold_only_what_a_principal_and_a_team_keep(scim_a):
    user = scim_a.get(f"/Schemas/{USER}").json()
    assert _attributes(user) == {
        "userName": set(),
        "name": {"formatted"},
        "displayName": set(),
        "active": set(),
        "emails": {"value", "type"},
        "groups": {"value", "$ref", "display", "type"},
    }
    by_name = {a["name"]: a for a in user["attributes"]}
    assert by_name["userName"]["mutability"] == "immutable" and by_name["userName"]["required"]
    assert by_name["active"]["required"] and by_name["groups"]["mutability"] == "readOnly"
    emails_type = next(s for s in by_name["emails"]["subAttributes"] if s["name"] == "type")
    assert emails_type["canonicalValues"] == ["work"]
    group = scim_a.get(f"/Schemas/{GROUP}").json()
    assert _attributes(group) == {"displayName": set(), "members": {"value", "$ref", "type"}}
    assert group["attributes"][0]["mutability"] == "immutable"
    config = scim_a.get("/ServiceProviderConfig").json()
    assert config["sort"] == {"supported": True} and config["patch"] == {"supported": True}


def test_a_filter_or_sort_on_an_attribute_not_served_is_a_400(scim_a, people_a):
    response = scim_a.get("/Users", filter='title eq "boss"')
    assert response.status_code == 400 and response.json()["scimType"] == "invalidFilter"
    response = scim_a.get("/Users", sortBy="nickName")
    assert response.status_code == 400 and response.json()["scimType"] == "invalidPath"


def test_attributes_and_excluded_attributes_on_one_and_on_a_list(scim_a, people_a):
    alice = scim_a.get("/Users/alice@a.example", attributes="emails,name.formatted").json()
    assert alice == {
        "schemas": [USER],
        "id": "alice@a.example",
        "emails": [{"value": "alice@a.example", "type": "work"}],
        "name": {"formatted": "Alice Liddell"},
    }
    listed = scim_a.get("/Users", excludedAttributes="groups,emails,meta").json()["Resources"]
    assert {r["id"] for r in listed} == {"alice@a.example", "bob@a.example", "albert@a.example"}
    assert all("groups" not in r and "emails" not in r and "userName" in r for r in listed)
    group = scim_a.get("/Groups/support", attributes="displayName").json()
    assert group == {"schemas": [GROUP], "id": "support", "displayName": "support"}
    both = scim_a.get("/Users", attributes="userName", excludedAttributes="emails")
    assert both.status_code == 400 and both.json()["schemas"] == [ERROR]


def test_sort_by_and_sort_order(scim_a, people_a):
    ids = _ids(scim_a.get("/Users", sortBy="userName", sortOrder="descending"))
    assert ids == ["bob@a.example", "alice@a.example", "albert@a.example"]
    assert _ids(scim_a.get("/Users", sortBy="displayName")) == [
        "albert@a.example",
        "alice@a.example",
        "bob@a.example",  # no name: last when ascending
    ]


def test_post_search_on_users_groups_and_the_root(scim_a, scim_b, people_a):
    body = {
        "schemas": [SEARCH],
        "filter": 'userName sw "al"',
        "sortBy": "userName",
        "attributes": ["userName"],
        "startIndex": 2,
        "count": 1,
    }
    page = scim_a.send("post", "/Users/.search", body).json()
    assert page["totalResults"] == 2 and page["startIndex"] == 2 and page["itemsPerPage"] == 1
    assert page["Resources"] == [
        {"schemas": [USER], "id": "alice@a.example", "userName": "alice@a.example"}
    ]
    groups = scim_a.send("post", "/Groups/.search", {"schemas": [SEARCH]}).json()
    assert [g["id"] for g in groups["Resources"]] == ["support"]
    # The root searches Users and Groups at once; displayName is both's.
    root = scim_a.send("post", "/.search", {"schemas": [SEARCH], "filter": "displayName pr"})
    assert root.status_code == 200, root.content
    assert {(r["schemas"][0], r["id"]) for r in root.json()["Resources"]} == {
        (USER, "alice@a.example"),
        (USER, "albert@a.example"),
        (GROUP, "support"),
    }
    assert scim_b.send("post", "/.search", {"schemas": [SEARCH]}).json()["totalResults"] == 1
    bad = scim_a.send("post", "/Users/.search", {"schemas": [SEARCH], "filter": "userName eq"})
    assert bad.status_code == 400 and bad.json()["scimType"] == "invalidFilter"
    assert scim_a.get("/Users/.search").status_code == 405
    assert scim_a.get("/.search").status_code == 405


@pytest.fixture
def scim_wsgi(tenant_a):
    """scim2-client calling Django's WSGI application in this process, inside the test's
    transaction: like Django's test client, without closing the connection per request."""
    key = make_key(tenant_a, scopes=("scim",))
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield WSGISCIMClient(
            get_wsgi_application(),
            base_url="http://testserver/scim/v2",
            headers={"Authorization": f"Bearer {key}"},
        )
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


# Every check scim2-tester 0.5 runs against this server, by (resource type, check): all of
# them succeed and none is skipped (a check that stops running, or starts being skipped,
# fails this as surely as one that fails).
TESTER_CHECKS = {
    (None, "service_provider_config_endpoint"): 1,
    (None, "service_provider_config_endpoint_methods"): 4,
    (None, "query_all_resource_types"): 1,
    (None, "query_resource_type_by_id"): 2,
    (None, "access_invalid_resource_type"): 1,
    (None, "resource_types_endpoint_methods"): 4,
    (None, "resource_types_schema_validation"): 2,
    (None, "query_all_schemas"): 1,
    (None, "access_schema_by_id"): 2,
    (None, "access_invalid_schema"): 1,
    (None, "schemas_endpoint_methods"): 4,
    (None, "random_url"): 1,
    **{
        (kind, check): count
        for kind, patched in (("User", (4, 4, 5)), ("Group", (2, 2, 2)))
        for check, count in {
            "object_creation": 1,
            "object_query": 1,
            "object_query_without_id": 1,
            "object_query_with_attributes": 2,
            "object_list_with_attributes": 2,
            "search_with_attributes": 2,
            "object_replacement": 1,
            "object_deletion": 1,
            "check_add_attribute": patched[0],
            "check_remove_attribute": patched[1],
            "check_replace_attribute": patched[2],
        }.items()
    },
}


def test_scim2_tester_finds_no_failure_and_skips_nothing(scim_wsgi, people_a):
    # Every check, CRUD, PATCH, attributes and .search included (docs/api.md, SCIM).
    results = check_server(scim_wsgi)
    failed = [
        (r.resource_type, r.title, r.reason)
        for r in results
        if r.status in (Status.ERROR, Status.CRITICAL)
    ]
    assert not failed
    skipped = [(r.resource_type, r.title, r.reason) for r in results if r.status == Status.SKIPPED]
    assert skipped == []
    ran = Counter((r.resource_type, r.title) for r in results if r.status == Status.SUCCESS)
    assert dict(ran) == TESTER_CHECKS
