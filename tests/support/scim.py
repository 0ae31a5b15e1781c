"""A SCIM client for /scim/v2/ and its error schema.
(Moved from tests/console/accounts/test_scim.py, which imports it from here.)"""

ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


class Scim:
    def __init__(self, client, key):
        self.client, self.key = client, key

    def get(self, path, **params):
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        return self.client.get(f"/scim/v2{path}", params, headers=headers)

    def send(self, method, path, body):
        import json

        return getattr(self.client, method)(
            f"/scim/v2{path}",
            json.dumps(body),
            content_type="application/scim+json",
            headers={"Authorization": f"Bearer {self.key}"},
        )
