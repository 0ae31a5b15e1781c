"""Loopback HTTP endpoints for the outbound tests, each served by a thread of the test
process on 127.0.0.1: a healthy one (`ok`), two that trickle a byte every 0.5 s forever (`trickle`:
the body; `trickle_headers`: the headers), one that answers a huge body as fast as it can
(`huge`, counting what it managed to send)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Endpoint:
    def __init__(self, mode: str = "ok", *, size: int = 96 * 1024 * 1024):
        self.mode = mode
        self.size = size
        self.requests: list[bytes] = []
        self.hosts: list[str | None] = []  # each request's Host header
        self.received = threading.Event()
        self.sent = 0  # body bytes the huge endpoint got out before the client stopped reading
        self.done = threading.Event()  # the huge endpoint's write loop has ended
        self.stopping = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server API
                self._answer(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def do_GET(self):  # noqa: N802
                self._answer(b"")

            def _answer(self, body: bytes) -> None:
                endpoint.requests.append(body)
                endpoint.hosts.append(self.headers.get("Host"))
                endpoint.received.set()
                try:
                    getattr(self, f"_{endpoint.mode}")()
                except OSError:
                    pass
                finally:
                    endpoint.done.set()

            def _ok(self):
                self.send_response(204)
                self.end_headers()

            def _trickle(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.flush()
                while not endpoint.stopping.is_set():
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.5)

            def _trickle_headers(self):
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                self.wfile.flush()
                while not endpoint.stopping.is_set():
                    self.wfile.write(b"a")
                    self.wfile.flush()
                    time.sleep(0.5)

            def _huge(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(endpoint.size))
                self.end_headers()
                chunk = b" " * 65536
                while endpoint.sent < endpoint.size and not endpoint.stopping.is_set():
                    self.wfile.write(chunk)
                    endpoint.sent += len(chunk)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
