"""Tests send traffic only to loopback: the guard (tests/loopback_only) refuses a name that is
not a loopback one and a connection off the machine before anything is sent, in the test
process and in every Python process a test starts."""

import socket
import subprocess
import sys

import pytest


def test_a_name_off_the_machine_does_not_resolve_in_the_test_process():
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("example.com", 443)
    assert socket.getaddrinfo("localhost", 80)


def test_a_connection_off_the_machine_fails_before_it_is_made():
    with socket.socket() as sock, pytest.raises(OSError, match="loopback only"):
        sock.connect(("192.0.2.1", 443))  # TEST-NET-1: refused before any packet


def test_a_python_process_started_by_a_test_has_the_guard_too():
    code = (
        "import socket\n"
        "try:\n    socket.getaddrinfo('example.com', 443)\nexcept socket.gaierror as e:\n"
        "    print('refused', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.startswith("refused"), out.stderr
