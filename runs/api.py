"""Runs over the wire: admission, listing, events (and, later, states and outcomes)."""

from ninja import Router

router = Router(tags=["runs"])
