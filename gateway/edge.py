"""What the gateway's edge remembers per server process, so that a request costs no database
trip to learn who it is for: a key (with its principal and tenant) and the server it names,
by the key's SHA-256 and the server's name; a session by its id; the roles of the tenant's
rules' authors (the rule authority a rule-passed call is checked against, approvals'
RuleAuthority, per compiled rule set: the rules themselves are read again whenever the
tenant's rules version moves). Each for GAVEL_MCP_CACHE_SECONDS (default 5); every row
change the process itself makes to a key, a principal, a role, a server or a session (a
revoke, a deactivation, a role taken away, a disabled server, a session ended) empties it at
once (gateway/apps.py's receivers), other processes see it when their copy runs out.
Refusals are never remembered: a wrong key asks the database every time.

The key's rate limit is taken on every request, remembered or not, and with Redis it returns
the keys epoch (console/directory/keycopies.py): a key copy is used only while the epoch is
the one read before its rows were, so a key revoked, a principal deactivated or a tenant
changed on any process answers 401/403 at the key's next request here too."""

from __future__ import annotations

import hashlib
import threading
import time

from django.conf import settings

_lock = threading.Lock()
# (header digest, server name) -> (at, key, server, the keys epoch they were read at)
_keys: dict[tuple[str, str], tuple[float, object, object, int | None]] = {}
_sessions: dict[tuple[int, int, str], tuple[float, object]] = {}
_authorities: dict[int, tuple[float, object, object]] = {}  # id(ruleset): (at, ruleset, it)
MAX_ENTRIES = 10_000  # a process's memory bound: full, it starts again empty


def _digest(header: str) -> str:
    return hashlib.sha256(header.encode()).hexdigest()


def _fresh(at: float) -> bool:
    return time.monotonic() - at < settings.GAVEL_MCP_CACHE_SECONDS


def key_and_server(header: str, name: str):
    """(key, server, the keys epoch they were read at: None without Redis) remembered for
    this Authorization header and server name, or None."""
    entry = _keys.get((_digest(header), name))
    if entry is None or not _fresh(entry[0]):
        return None
    return entry[1], entry[2], entry[3]


def keep_key_and_server(header: str, name: str, key, server, epoch: int | None) -> None:
    if settings.GAVEL_MCP_CACHE_SECONDS <= 0:
        return
    with _lock:
        if len(_keys) >= MAX_ENTRIES:
            _keys.clear()
        _keys[(_digest(header), name)] = (time.monotonic(), key, server, epoch)


def drop_key(header: str, name: str) -> None:
    with _lock:
        _keys.pop((_digest(header), name), None)


def session(*, server_id: int, principal_id: int, public_id: str):
    entry = _sessions.get((server_id, principal_id, public_id))
    if entry is None or not _fresh(entry[0]):
        return None
    return entry[1]


def keep_session(session) -> None:
    if settings.GAVEL_MCP_CACHE_SECONDS <= 0:
        return
    with _lock:
        if len(_sessions) >= MAX_ENTRIES:
            _sessions.clear()
        key = (session.server_id, session.principal_id, session.public_id)
        _sessions[key] = (time.monotonic(), session)


def authority(ruleset):
    """The RuleAuthority of this compiled rule set (approvals.access), kept for the window."""
    from approvals.access import RuleAuthority

    entry = _authorities.get(id(ruleset))
    if entry is not None and entry[1] is ruleset and _fresh(entry[0]):
        return entry[2]
    made = RuleAuthority(ruleset)
    if settings.GAVEL_MCP_CACHE_SECONDS > 0:
        with _lock:
            if len(_authorities) >= 64:  # a rule set per tenant in use: old ones go
                _authorities.clear()
            _authorities[id(ruleset)] = (time.monotonic(), ruleset, made)
    return made


def forget(**_) -> None:
    """A key, principal, server or session row changed in this process: forget everything
    (such writes are rare; the next request of each key reads its rows again)."""
    with _lock:
        _keys.clear()
        _sessions.clear()
        _authorities.clear()
