"""The management API for the directory (`manage` scope, `admin`): principals, roles, teams.

Handlers only translate: the writes are `console.services.*`, the reads `console.selectors_*`.
"""

from ninja import Router

router = Router(tags=["principals, roles and teams"])
