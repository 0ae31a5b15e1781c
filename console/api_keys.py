"""The management API for API keys and the tenant's settings (`manage` scope, `admin`)."""

from ninja import Router

router = Router(tags=["keys and tenant settings"])
