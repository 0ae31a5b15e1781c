"""What keeps pytest-xdist workers apart: each worker's own slice of a port range, and its
own Redis prefix. Outside xdist (no PYTEST_XDIST_WORKER) the worker is number 0 of 1."""

from __future__ import annotations

import os
import socket


def worker_index() -> int:
    """gw0 → 0, gw1 → 1, ...; 0 when the tests run in one process."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def worker_count() -> int:
    return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))


def worker_suffix() -> str:
    """'' outside xdist, '-gw1' in worker gw1."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"-{name}" if name else ""


def free_port(ports: range) -> int:
    """A port of `ports` nothing listens on, searched from this worker's own slice of the range
    (so two workers probing at the same moment do not pick the same one), then the rest."""
    count = worker_count()
    start = (len(ports) // count) * (worker_index() % count)
    for offset in range(len(ports)):
        port = ports[(start + offset) % len(ports)]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")
