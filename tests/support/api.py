"""The API client the tests use: Django's test client with a bearer key and JSON bodies."""


class ApiClient:
    """Django's test client with a bearer key and JSON bodies."""

    def __init__(self, client, key):
        self.client = client
        self.key = key

    def _headers(self, extra):
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        headers.update(extra or {})
        return headers

    def get(self, path, headers=None, **params):
        return self.client.get(path, params, headers=self._headers(headers))

    def post(self, path, body=None, headers=None, raw=None):
        import json

        data = raw if raw is not None else json.dumps(body)
        return self.client.post(
            path, data, content_type="application/json", headers=self._headers(headers)
        )

    def patch(self, path, body=None, headers=None, raw=None):
        import json

        data = raw if raw is not None else json.dumps(body)
        return self.client.patch(
            path, data, content_type="application/json", headers=self._headers(headers)
        )

    def delete(self, path, headers=None):
        return self.client.delete(path, headers=self._headers(headers))

    def put(self, path, body=None, headers=None, raw=None):
        import json

        data = raw if raw is not None else json.dumps(body)
        return self.client.put(
            path, data, content_type="application/json", headers=self._headers(headers)
        )
