"""The runs socket tests' run: a key, its events posted, a frame matcher.
(Moved from tests/runs/test_consumers.py, which imports it from here.)"""

from asgiref.sync import sync_to_async

from tests.support.api import ApiClient
from tests.support.factories import make_key

RUN = "run_live_1"


def _admit(tenant, principal=None) -> ApiClient:
    from django.test import Client

    api = ApiClient(Client(), make_key(tenant, scopes=("ingest",)))
    body = {"id": RUN, "agentId": "support-bot", "agentVersion": 1}
    body["principalId"] = principal.external_id if principal else "alice@example.com"
    assert api.post("/api/v1/runs", body).status_code == 201
    return api


async def admit(tenant, principal=None) -> ApiClient:
    return await sync_to_async(_admit)(tenant, principal)


async def post_events(api, *events):
    response = await sync_to_async(api.post)(f"/api/v1/runs/{RUN}/events", {"events": list(events)})
    assert response.status_code == 200, response.content
    return response.json()["lastSeq"]


def has(text):
    return lambda frame: text in frame
