"""Database calls from async code that give their connection back at once."""

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections


def released(fn, *, thread_sensitive: bool = True):
    """`sync_to_async(fn)`, after which the thread's connections go back (to the pool, or
    closed, as CONN_MAX_AGE says) instead of staying with the request until it ends: an async
    handler that holds its request (the decisions long-poll) holds no connection while it
    waits. A connection inside a transaction (a test's) is left alone. `thread_sensitive=False`:
    in any thread of the executor, not the process's one sync thread (work of concurrent
    requests then runs side by side; each call takes its own connection and gives it back)."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            if not any(c.in_atomic_block for c in connections.all(initialized_only=True)):
                close_old_connections()

    return sync_to_async(call, thread_sensitive=thread_sensitive)


def unreachable(exc: BaseException) -> bool:
    """Is this the database failing to answer (as opposed to a bug or a bad value)? Django's
    OperationalError / InterfaceError (a refused or lost connection, the pool's timeout, a
    cancelled statement, SQLite's "database is locked"), and psycopg's own when raw psycopg
    is used. Such a request answers 503 with Retry-After, never 500."""
    from django.db import InterfaceError, OperationalError

    kinds: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
    try:
        import psycopg
    except ImportError:  # SQLite-only installs
        pass
    else:
        kinds += (psycopg.OperationalError, psycopg.InterfaceError)
    return isinstance(exc, kinds)
