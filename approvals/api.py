"""Approvals over the wire: decisions for runtimes (long-poll) and deciding with a `decide` key."""

from ninja import Router

router = Router(tags=["approvals"])
