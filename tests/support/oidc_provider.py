"""A real OpenID provider for the tests: oidc-provider-mock (Authlib's authorization server
under Flask) served on 127.0.0.1 on a free port, in a thread of the test process.

Any client id and secret are accepted; a person signs in by posting a `sub` to its
authorization form, with the claims stored for that `sub` (`PUT /users/<sub>`).
"""

import threading
from contextlib import contextmanager
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import oidc_provider_mock
import werkzeug.serving


@contextmanager
def running_provider(*, token_max_age: timedelta = timedelta(hours=1)):
    app = oidc_provider_mock.app(require_nonce=True, access_token_max_age=token_max_age)
    server = werkzeug.serving.make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(5)
        server.server_close()


def set_user(issuer: str, sub: str, **claims) -> None:
    response = httpx.put(f"{issuer}/users/{sub}", json=claims, timeout=5)
    assert response.status_code == 204, response.text


def authorize(authorization_url: str, sub: str) -> str:
    """What a person does at the provider (posts their `sub` to its form): the URL the
    provider sends the browser back to, with the code and the state."""
    response = httpx.post(authorization_url, data={"sub": sub}, timeout=5)
    assert response.status_code == 302, response.text
    return response.headers["location"]


def query(url: str) -> dict:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
