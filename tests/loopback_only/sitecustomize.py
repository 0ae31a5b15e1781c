"""Tests send traffic only to loopback. `install()` makes a name that is not a loopback one
fail to resolve, and a connection to an address off the machine fail, in this process. The
test process installs it (tests/conftest.py), and puts this folder on PYTHONPATH so that every
Python process a test starts (daphnes, workers, the fuzzed server) imports this module at
start-up as its `sitecustomize` and installs it too."""

import errno
import ipaddress
import socket


def loopback(host) -> bool:
    host = host.decode() if isinstance(host, bytes) else str(host or "")
    if host in ("", "localhost", "testserver") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def install() -> None:
    if getattr(socket, "_gavel_loopback_only", False):
        return
    resolve, connect, connect_ex = (
        socket.getaddrinfo,
        socket.socket.connect,
        socket.socket.connect_ex,
    )

    def getaddrinfo(host, *args, **kwargs):
        if not loopback(host):
            raise socket.gaierror(socket.EAI_NONAME, f"tests resolve loopback names only: {host}")
        return resolve(host, *args, **kwargs)

    def refused(sock, address) -> bool:
        return sock.family in (socket.AF_INET, socket.AF_INET6) and not loopback(address[0])

    def guarded_connect(sock, address):
        if refused(sock, address):
            raise OSError(errno.ENETUNREACH, f"tests connect to loopback only: {address[0]}")
        return connect(sock, address)

    def guarded_connect_ex(sock, address):
        return errno.ENETUNREACH if refused(sock, address) else connect_ex(sock, address)

    socket.getaddrinfo = getaddrinfo
    socket.socket.connect = guarded_connect
    socket.socket.connect_ex = guarded_connect_ex
    socket._gavel_loopback_only = True


install()
