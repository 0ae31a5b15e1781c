"""Security regressions of the HTTP edge, against a real daphne on loopback (the documented
`daphne … console.asgi:application`) and at the ASGI level.

M4: a body over its path's limit is refused with a 413 from its Content-Length, before it is
read and before any key is looked at, and a chunked one once it passes the limit. L4: a
connection whose request headers (or body) do not arrive in time is closed."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.support.daphne import daphne
from tests.support.live_console import live_env, manage

MIB = 1024 * 1024
HEADER_TIMEOUT = 2  # GAVEL_HTTP_HEADER_TIMEOUT of the test's daphne
BODY_TIMEOUT = 3  # GAVEL_HTTP_BODY_TIMEOUT


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    var = tmp_path_factory.mktemp("edge")
    env = live_env(var, "secedge")
    env.update(
        GAVEL_HTTP_HEADER_TIMEOUT=str(HEADER_TIMEOUT), GAVEL_HTTP_BODY_TIMEOUT=str(BODY_TIMEOUT)
    )
    manage(env, "migrate", "--verbosity", "0")
    with daphne(env, var / "daphne.log") as url:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


def _connect(server) -> socket.socket:
    conn = socket.create_connection(server, timeout=10)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    return conn


def _response(conn, timeout: float) -> bytes:
    """Everything the server sends until it closes (or `timeout` passes without a byte)."""
    conn.settimeout(timeout)
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except TimeoutError:
        pass
    except ConnectionResetError:
        if not data:
            raise
    return data


def _status_and_body(raw: bytes) -> tuple[int, dict, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, body


def _send_until_refused(conn, total: int) -> int:
    """Keep sending body bytes; how many went out before the server stopped taking them."""
    chunk, sent = b"x" * MIB, 0
    conn.settimeout(5)
    try:
        while sent < total:
            sent += conn.send(chunk)
    except OSError:  # reset, broken pipe, or the server stopped reading (timeout)
        pass
    return sent


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/api/v1/runs", "application/json"),
        ("/accounts/login/", "text/html"),
        ("/scim/v2/Users", "application/scim+json"),
        ("/integrations/slack/actions", "text/html"),
    ],
)
def test_m4_a_declared_600_mib_body_is_refused_413_before_it_is_read(server, path, kind):
    conn = _connect(server)
    started = time.monotonic()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {600 * MIB}\r\n\r\n"
    )
    conn.sendall(head.encode() + b'{"events": [')  # no key, no session: refused all the same
    status, headers, body = _status_and_body(_response(conn, 5))
    assert status == 413
    assert time.monotonic() - started < 5
    assert headers["content-type"].startswith(kind)
    if path.startswith("/api/"):
        error = json.loads(body)["error"]
        assert error["code"] == "payload_too_large"
        assert error["details"] == {"limitBytes": 2 * MIB}
    if path.startswith("/scim/"):
        assert json.loads(body)["status"] == "413"
    # The rest is not read: the connection stops taking bytes long before 600 MiB.
    assert _send_until_refused(conn, 600 * MIB) < 64 * MIB
    conn.close()


def test_m4_a_chunked_body_is_refused_413_once_it_passes_the_limit(server):
    conn = _connect(server)
    head = (
        "POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    conn.sendall(head.encode())
    chunk = f"{MIB:x}\r\n".encode() + b"x" * MIB + b"\r\n"
    try:
        for _ in range(3):  # 3 MiB: over the API's 2 MiB
            conn.sendall(chunk)
    except OSError:  # the server has answered and stopped reading: the 413 is there to read
        pass
    status, headers, body = _status_and_body(_response(conn, 5))
    assert status == 413, "a chunked body over the limit must not reach the application"
    assert json.loads(body)["error"]["code"] == "payload_too_large"
    conn.close()


def test_bodies_within_the_limit_still_reach_the_application(server):
    conn = _connect(server)
    body = json.dumps({"id": "r", "agentId": "a", "agentVersion": 1}).encode()
    head = (
        f"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    conn.sendall(head.encode() + body)
    status, _, answer = _status_and_body(_response(conn, 10))
    assert status == 401  # the key is looked at: the body was within the limit
    assert json.loads(answer)["error"]["code"] == "unauthorized"
    conn.close()


def test_a_body_reaches_the_application_unparsed_by_the_server(server):
    """Twisted would parse a POST's multipart body into `request.args` (which daphne never
    reads) and answer a malformed one 400 itself; the body is the application's to read."""
    conn = _connect(server)
    body = b"not a multipart body"
    head = (
        f"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: multipart/form-data; boundary=x\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    conn.sendall(head.encode() + body)
    status, _, answer = _status_and_body(_response(conn, 10))
    assert status == 401, answer  # the application's answer: the key is looked at first
    assert json.loads(answer)["error"]["code"] == "unauthorized"
    conn.close()


@pytest.mark.parametrize("kept_alive", [False, True])
def test_l4_a_connection_that_never_finishes_its_headers_is_closed_within_the_bound(
    server, kept_alive
):
    conn = _connect(server)
    if kept_alive:  # an ordinary request first; the slow one follows on the same connection
        conn.sendall(b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _one_response(conn) == 200
        time.sleep(HEADER_TIMEOUT + 0.5)  # idle between requests is not a slow request:
        conn.sendall(b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _one_response(conn) == 200  # still open (Twisted's idle timeout is 60 s)
    started = time.monotonic()
    conn.sendall(b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    closed_at = None
    for n in range(40):  # a header line every 0.25 s, never the blank line that ends them
        time.sleep(0.25)
        try:
            conn.sendall(f"X-Slow-{n}: 1\r\n".encode())
            conn.settimeout(0.01)
            if conn.recv(1024) == b"":
                closed_at = time.monotonic()
                break
        except TimeoutError:
            continue
        except OSError:
            closed_at = time.monotonic()
            break
    assert closed_at is not None, "the slow request is still open after 10 s"
    assert closed_at - started < HEADER_TIMEOUT + 2
    conn.close()


def test_l4_a_body_that_never_finishes_is_closed_within_the_bound(server):
    conn = _connect(server)
    started = time.monotonic()
    conn.sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{")
    assert _response(conn, BODY_TIMEOUT + 5) in (b"", None)
    assert time.monotonic() - started < BODY_TIMEOUT + 2
    conn.close()


def _one_response(conn) -> int:
    """Read one response of a kept-alive connection (by its Content-Length): its status."""
    conn.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    status, headers, body = _status_and_body(data)
    while len(body) < int(headers["content-length"]):
        body += conn.recv(65536)
    return status


def test_an_ordinary_request_on_a_kept_alive_connection_is_unaffected(server):
    conn = _connect(server)
    for _ in range(2):
        conn.sendall(b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _one_response(conn) == 200
    conn.close()


# --- the same limits at the ASGI level (any ASGI server) ---------------------------------------


def _scope(path: str, headers: list) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost"), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }


@pytest.mark.django_db  # Django's handler runs (its signals reach the database)
async def test_m4_the_asgi_app_answers_413_from_the_content_length_without_reading():
    from console.asgi import application

    sent = []

    async def receive():
        raise AssertionError("the body was read")

    async def send(message):
        sent.append(message)

    scope = _scope("/api/v1/runs", [(b"content-length", str(600 * MIB).encode())])
    await application(scope, receive, send)
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["error"]["details"] == {"limitBytes": 2 * MIB}
    sent.clear()
    page = _scope("/accounts/login/", [(b"content-length", str(2 * MIB).encode())])
    await application(page, receive, send)  # pages: GAVEL_MAX_FORM_BODY_BYTES (1 MiB)
    assert sent[0]["status"] == 413
    assert dict(sent[0]["headers"])[b"content-type"].startswith(b"text/html")


@pytest.mark.django_db  # Django's handler runs (its signals reach the database)
async def test_m4_the_asgi_app_stops_reading_a_streamed_body_at_the_limit():
    from console.asgi import application

    reads, sent = [], []

    async def receive():  # a body without a Content-Length, 32 MiB in 1 MiB chunks
        reads.append(1)
        return {"type": "http.request", "body": b"x" * MIB, "more_body": len(reads) < 32}

    async def send(message):
        sent.append(message)

    await application(_scope("/scim/v2/Users", []), receive, send)
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["status"] == "413"
    assert len(reads) == 2  # 1 MiB, then the byte over the SCIM path's 1 MiB: no more
    assert len(sent) == 2  # Django answered nothing of its own


@pytest.mark.parametrize("code", [422, 429, 409, 200])
def test_every_status_line_has_its_reason_phrase(code):
    """Twisted's table lacks 422 and 429 ("HTTP/1.1 422 Unknown Status" on the wire, in every
    browser's console); the standard library's names them."""
    from http import HTTPStatus

    from console.core.serving import GuardedRequest

    request = GuardedRequest.__new__(GuardedRequest)  # no channel: only the status is set
    request.setResponseCode(code)
    assert request.code == code
    assert request.code_message.decode() == HTTPStatus(code).phrase
    request.setResponseCode(code, b"Own Words")
    assert request.code_message == b"Own Words"
