"""Gavel SDK: a client for the Gavel console's wire contract (no Django).

from gavel_sdk import GavelClient
gavel = GavelClient("https://gavel.example", api_key)
"""

from gavel_sdk._ops import RetryPolicy
from gavel_sdk.client import AsyncGavelClient, GavelClient
from gavel_sdk.errors import (
    AlreadyDecided,
    Conflict,
    ConnectionFailed,
    DecisionsTimeout,
    Forbidden,
    GavelError,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    SeqGap,
    ServerError,
    Unauthorized,
    Unavailable,
    ValidationFailed,
)
from gavel_sdk.events import RunEvents, held_call
from gavel_sdk.session import BudgetExceeded
from gavel_sdk.types import Approval, BudgetCheck, BudgetEntry, Decision, Decisions, Run, Usage

__version__ = "0.1.0"

__all__ = [
    "AlreadyDecided",
    "Approval",
    "AsyncGavelClient",
    "BudgetCheck",
    "BudgetEntry",
    "BudgetExceeded",
    "Conflict",
    "ConnectionFailed",
    "Decision",
    "Decisions",
    "DecisionsTimeout",
    "Forbidden",
    "GavelClient",
    "GavelError",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "RetryPolicy",
    "Run",
    "RunEvents",
    "SeqGap",
    "ServerError",
    "Unauthorized",
    "Unavailable",
    "Usage",
    "ValidationFailed",
    "held_call",
]
