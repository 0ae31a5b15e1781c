"""Gavel SDK: a client for the Gavel console's wire contract (no Django)."""

__version__ = "0.1.0"
