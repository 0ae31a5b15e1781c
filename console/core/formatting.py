"""How the console writes numbers, money, times and statuses: plain functions, used by the
context functions and registered as template filters by console/templatetags/gavel.py."""

import json
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache

from babel.numbers import format_currency, get_currency_precision
from django.utils import timezone


def money(minor_units, currency: str = "", locale: str = "en") -> str:
    """An amount of minor units. With its currency, as the locale writes it (CLDR, via Babel),
    with the currency's own minor digits: USD 1234 → "$12.34", EUR → "€12.34", JPY 1234 →
    "¥1,234". Without one, a plain amount of hundredths: 1234 → "12.34"."""
    if minor_units is None:
        return "—"
    if currency:
        return _in_currency(int(minor_units), currency, locale)
    sign = "-" if minor_units < 0 else ""
    units, cents = divmod(abs(int(minor_units)), 100)
    text = f"{sign}{units:,}.{cents:02d}"
    return f"{text} {currency}" if currency else text


@lru_cache(maxsize=8192)
def _in_currency(minor_units: int, currency: str, locale: str) -> str:
    """Babel's formatting of one amount (pure, and the desk's page formats 100 of them: the
    same amounts recur, so each is formatted once a process)."""
    digits = get_currency_precision(currency)
    amount = Decimal(minor_units).scaleb(-digits)
    return format_currency(amount, currency, locale=locale)


def short_duration(delta: timedelta) -> str:
    """A short human duration: "45s", "3m", "2h", "5d"."""
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def duration_ms(ms) -> str:
    """Milliseconds as a short human duration: 600000 → "10m"."""
    if ms is None:
        return "—"
    return short_duration(timedelta(milliseconds=int(ms)))


def age(moment: datetime | None) -> str:
    """How long ago: "3m", "2h", "5d"."""
    if moment is None:
        return "—"
    return short_duration(timezone.now() - moment)


def pretty_json(value) -> str:
    """JSON, indented, for a <pre> (escaped by the template like any text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


STATUS_CLASSES = {
    "running": "is-info",
    "awaiting_approval": "is-warning",
    "pending": "is-warning",
    "done": "is-success",
    "approved": "is-success",
    "aborted": "is-dark",
    "cancelled": "is-dark",
    "failed": "is-danger",
    "denied": "is-danger",
    "expired": "is-light",
}


def status_class(status: str) -> str:
    """A Bulma colour class for a run or approval status."""
    return STATUS_CLASSES.get(status, "is-light")


def humanize_status(status: str) -> str:
    return (status or "").replace("_", " ")
