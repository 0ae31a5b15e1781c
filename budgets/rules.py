"""The pure arithmetic of budgets: periods in a time zone, spend against a ceiling, the linear
projection and which thresholds a spend has reached. No database, no clock (`now` is given)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal
from zoneinfo import ZoneInfo

PERIODS = ("day", "week", "month")
THRESHOLD_MIN, THRESHOLD_MAX = 1, 1000
DEFAULT_THRESHOLDS = (80, 100)


def zone(name: str | None) -> ZoneInfo:
    """The tenant's IANA zone (UTC for one this server does not know)."""
    try:
        return ZoneInfo(name or "UTC")
    except (KeyError, ValueError):
        return ZoneInfo("UTC")


def local_today(now: datetime, tz: ZoneInfo) -> date:
    return now.astimezone(tz).date()


def _midnight(day: date, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, time(0), tzinfo=tz)


def period_days(period: str, today: date) -> tuple[date, date]:
    """The period holding `today` as local days: [first, end) (end is the next period's first
    day). A day; a week from Monday; a month from the 1st."""
    if period == "day":
        return today, today + timedelta(days=1)
    if period == "week":
        first = today - timedelta(days=today.weekday())
        return first, first + timedelta(days=7)
    if period == "month":
        first = today.replace(day=1)
        following = (first + timedelta(days=32)).replace(day=1)
        return first, following
    raise ValueError(f"unknown period {period!r}")


def period_start_of(first: date, tz: ZoneInfo) -> datetime:
    """The moment a period whose first local day is `first` starts."""
    return _midnight(first, tz)


def period_bounds(period: str, now: datetime, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """The current period as moments in the zone: local midnight of its first day to local
    midnight of the next period's first day."""
    first, end = period_days(period, local_today(now, tz))
    return _midnight(first, tz), _midnight(end, tz)


def percent(spent: int, ceiling: int) -> float:
    """spent / ceiling x 100, rounded half up to 2 decimals (0 for a ceiling of 0)."""
    if ceiling <= 0:
        return 0.0
    value = Decimal(spent * 100) / Decimal(ceiling)
    return float(value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def projected(spent: int, start: datetime, end: datetime, now: datetime) -> int:
    """The spend extrapolated linearly to `end` by the share of the period elapsed (rounded
    half up). At the period's first instant, and after its end, it is the spend."""
    # In UTC: two times of one zone subtract as wall clocks, which a DST change skews.
    start, end, now = (moment.astimezone(UTC) for moment in (start, end, now))
    elapsed = (now - start) // timedelta(microseconds=1)
    total = (end - start) // timedelta(microseconds=1)
    if elapsed <= 0 or elapsed >= total:
        return spent
    return (2 * spent * total + elapsed) // (2 * elapsed)


def crossed(thresholds, spent: int, ceiling: int) -> list[int]:
    """The thresholds (percents) a spend has reached: spent >= threshold% of the ceiling,
    exactly in integers."""
    return sorted(t for t in set(thresholds) if spent * 100 >= t * ceiling)


def fits(*, spent: int, estimate: int, ceiling: int | None) -> bool:
    """May `estimate` more be spent under `ceiling` (None: no ceiling)?"""
    return ceiling is None or spent + estimate <= ceiling
