"""Traffic for the outage tests: threads that each repeat one kind of request against a live
console and record every answer (or transport error) with its time and duration."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import httpx


@dataclass
class Answer:
    kind: str
    started: float  # time.monotonic() when sent
    seconds: float
    status: int | None  # None: a transport error (no HTTP answer at all)
    retry_after: str | None = None
    content_type: str = ""
    body: str = ""
    error: str = ""


class Traffic:
    """`kinds`: name → a function of an httpx.Client returning an httpx.Response (or None
    when there was nothing to do this time). Each kind runs in its own thread with its own
    client until `stop()`; `pause` seconds between requests."""

    def __init__(self, clients: dict[str, httpx.Client], kinds: dict, *, pause: float = 0.05):
        self.clients = clients
        self.kinds = kinds
        self.pause = pause
        self.answers: list[Answer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(kind,), daemon=True) for kind in kinds
        ]

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self, timeout: float = 45) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def _loop(self, kind: str) -> None:
        client, send = self.clients[kind], self.kinds[kind]
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                response = send(client)
            except httpx.HTTPError as exc:
                answer = Answer(kind, started, time.monotonic() - started, None, error=repr(exc))
            else:
                if response is None:
                    time.sleep(self.pause)
                    continue
                answer = Answer(
                    kind,
                    started,
                    time.monotonic() - started,
                    response.status_code,
                    response.headers.get("Retry-After"),
                    response.headers.get("Content-Type", ""),
                    response.text[:500],
                )
            with self._lock:
                self.answers.append(answer)
            time.sleep(self.pause)

    def of(self, kind: str, *, since: float = 0.0, until: float = float("inf")) -> list[Answer]:
        with self._lock:
            return [a for a in self.answers if a.kind == kind and since <= a.started < until]
