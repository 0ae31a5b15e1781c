"""Where a request came from (GAVEL_TRUSTED_PROXY_CIDRS, else GAVEL_TRUSTED_PROXIES
honoured): read by the sign-in lockout, the audit writer and the sockets alike."""

import ipaddress

from django.conf import settings


def _ip(raw: str):
    try:
        ip = ipaddress.ip_address(raw.strip())
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def client_address(request) -> str:
    """The address a request came from: with GAVEL_TRUSTED_PROXY_CIDRS, by address
    (`_behind_trusted`); else REMOTE_ADDR, or, behind GAVEL_TRUSTED_PROXIES proxies,
    the address the outermost trusted proxy saw (X-Forwarded-For's Nth entry from the right;
    the leftmost one if fewer were written). Anything that is not an IP address is ignored."""
    remote = request.META.get("REMOTE_ADDR", "") or ""
    if networks := settings.GAVEL_TRUSTED_PROXY_CIDRS:
        return _behind_trusted(remote, request.META.get("HTTP_X_FORWARDED_FOR", ""), networks)
    trusted = settings.GAVEL_TRUSTED_PROXIES
    if trusted:
        hops = [h for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
        if hops:
            ip = _ip(hops[-trusted] if len(hops) >= trusted else hops[0])
            if ip is not None:
                return str(ip)
    ip = _ip(remote)
    return str(ip) if ip is not None else (remote or "unknown")


def _behind_trusted(remote: str, forwarded: str, networks) -> str:
    """GAVEL_TRUSTED_PROXY_CIDRS: a peer outside the networks is the client whatever it
    says; from a trusted peer, X-Forwarded-For is read from the right, skipping trusted
    addresses, and the first other address is the client (garbage stops the walk: the last
    trusted hop is then the client)."""
    peer = _ip(remote)
    if peer is None:
        return remote or "unknown"
    client = peer
    if any(peer in net for net in networks if net.version == peer.version):
        for hop in reversed([h for h in forwarded.split(",") if h.strip()]):
            ip = _ip(hop)
            if ip is None:
                break
            client = ip
            if not any(ip in net for net in networks if net.version == ip.version):
                break
    return str(client)
