"""Where a request came from (GAVEL_TRUSTED_PROXIES honoured): read by the sign-in lockout,
the audit writer and the sockets alike."""

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
    """The address a request came from: REMOTE_ADDR, or, behind GAVEL_TRUSTED_PROXIES proxies,
    the address the outermost trusted proxy saw (X-Forwarded-For's Nth entry from the right;
    the leftmost one if fewer were written). Anything that is not an IP address is ignored."""
    remote = request.META.get("REMOTE_ADDR", "") or ""
    trusted = settings.GAVEL_TRUSTED_PROXIES
    if trusted:
        hops = [h for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
        if hops:
            ip = _ip(hops[-trusted] if len(hops) >= trusted else hops[0])
            if ip is not None:
                return str(ip)
    ip = _ip(remote)
    return str(ip) if ip is not None else (remote or "unknown")
