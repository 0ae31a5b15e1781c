"""The audit log over the wire (`manage` scope, `admin`): list, CSV/JSONL export, verify."""

from ninja import Router

router = Router(tags=["audit log"])
