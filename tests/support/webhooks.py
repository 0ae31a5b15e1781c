"""A webhook endpoint that answers the statuses it is given.
(Moved from tests/approvals/test_webhooks.py, which imports it from here.)"""

import httpx


class Receiver:
    """An endpoint (httpx MockTransport) answering the statuses it is given, in turn."""

    def __init__(self, *statuses):
        self.statuses = list(statuses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request):
        self.requests.append(request)
        status = self.statuses.pop(0) if self.statuses else 200
        if status == "refuse":
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(status)

    def client(self):
        return httpx.Client(transport=httpx.MockTransport(self))
