"""Database calls from async code that give their connection back at once."""

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections


def released(fn):
    """`sync_to_async(fn)`, after which the thread's connections go back (to the pool, or
    closed, as CONN_MAX_AGE says) instead of staying with the request until it ends: an async
    handler that holds its request (the decisions long-poll) holds no connection while it
    waits. A connection inside a transaction (a test's) is left alone."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            if not any(c.in_atomic_block for c in connections.all(initialized_only=True)):
                close_old_connections()

    return sync_to_async(call)
