"""What the budgets pages' charts show, as plain data for static/js/budgets.js: points, ticks
and every label already formatted here (money by Babel in the tenant's currency, days and
times in the tenant's zone), so the browser only draws. Pure: no database, no clock.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from babel.dates import format_date, format_datetime
from babel.numbers import format_compact_currency, format_currency, get_currency_precision

from console.core.formatting import money

LOCALE = "en"
HOUR = timedelta(hours=1)


def _major(minor: int, currency: str) -> Decimal:
    return Decimal(int(minor)).scaleb(-get_currency_precision(currency))


def money_tick(minor: int, *, step: int, currency: str) -> str:
    """An axis label: compact for big steps ("$1.5K"), whole units for medium ones ("$250"),
    with the minor unit when the step needs it ("$0.50")."""
    amount, step_major = _major(minor, currency), _major(step, currency)
    if step_major >= 1000:
        return format_compact_currency(amount, currency, locale=LOCALE, fraction_digits=1)
    if step_major >= 1:
        return format_currency(
            amount, currency, format="¤#,##0", locale=LOCALE, currency_digits=False
        )
    return money(minor, currency, LOCALE)


def nice_ticks(top: int, *, count: int = 5) -> list[int]:
    """0, step, 2*step, ... up to the first tick >= top; steps of 1, 2, 2.5 or 5 x 10^k minor
    units (never below 1)."""
    top = max(int(top), 1)
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = 10 * magnitude
    for m in (1, 2, 2.5, 5):
        if m * magnitude >= raw and m * magnitude == int(m * magnitude):
            step = int(m * magnitude)
            break
    return [step * n for n in range(math.ceil(top / step) + 1)]


def money_ticks(top: int, currency: str) -> list[dict]:
    ticks = nice_ticks(top)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1
    return [{"value": t, "label": money_tick(t, step=step, currency=currency)} for t in ticks]


def day_label(day: date, pattern: str = "MMM d") -> str:
    return format_date(day, pattern, locale=LOCALE)


def moment_label(moment: datetime, tz: ZoneInfo, pattern: str = "MMM d, HH:mm") -> str:
    return format_datetime(moment, pattern, tzinfo=tz, locale=LOCALE)


def _point(x: float, y: int, *, title: str, currency: str) -> dict:
    return {"x": round(x, 4), "y": y, "t": title, "v": money(y, currency, LOCALE)}


class PeriodAxis:
    """The x axis of a burn chart: days since the period's start for a week or a month, hours
    for a day (the rollups are per day, so within a day only now is known)."""

    def __init__(self, *, period: str, first: date, end: date, tz: ZoneInfo, start, stop, now):
        self.period, self.first, self.end, self.tz = period, first, end, tz
        self.start, self.stop, self.now = start, stop, now
        self.hours = period == "day"
        self.total = self._span(stop) if self.hours else (end - first).days

    def _span(self, moment) -> float:
        return (moment.astimezone(UTC) - self.start.astimezone(UTC)) / HOUR

    def at(self, moment: datetime) -> float:
        """Where a moment sits on the axis (clamped to the period)."""
        if self.hours:
            x = self._span(moment)
        else:
            local = moment.astimezone(self.tz)
            day = local.date()
            midnight = datetime.combine(day, datetime.min.time(), tzinfo=self.tz)
            following = datetime.combine(
                day + timedelta(days=1), datetime.min.time(), tzinfo=self.tz
            )
            elapsed = (moment.astimezone(UTC) - midnight.astimezone(UTC)) / (
                following.astimezone(UTC) - midnight.astimezone(UTC)
            )
            x = (day - self.first).days + elapsed
        return min(max(x, 0.0), float(self.total))

    def ticks(self) -> list[dict]:
        if self.hours:
            out = []
            for hour in range(0, math.floor(self.total) + 1, 3):
                moment = self.start.astimezone(UTC) + hour * HOUR
                out.append({"value": hour, "label": moment_label(moment, self.tz, "HH:mm")})
            return out
        every = 1 if self.total <= 7 else 5
        pattern = "EEE d" if self.total <= 7 else "MMM d"
        out = []
        for n in range(self.total + 1):
            labelled = n == self.total or (n % every == 0 and self.total - n >= every / 2)
            day = self.first + timedelta(days=n)
            out.append({"value": n, "label": day_label(day, pattern) if labelled else ""})
        return out


def burn_chart(
    *,
    axis: PeriodAxis,
    days: dict,
    spent: int,
    projected: int,
    ceiling: int,
    thresholds: list[int],
    crossed: list[int],
    alerts: list,
    currency: str,
    first_today: datetime | None = None,
) -> dict:
    """Cumulative spend (a line through the end of each finished day, flat until
    `first_today`, the moment today's spending began, then now), the linear projection from
    now to the period's end (dashed), the ceiling, and the thresholds (dotted, with a marker
    where each alert of this period fired)."""
    now_x = axis.at(axis.now)
    spent_points = [_point(0, 0, title=f"{day_label(axis.first)}, start", currency=currency)]
    if not axis.hours:
        today = axis.now.astimezone(axis.tz).date()
        cumulative = 0
        for n in range(max(0, (today - axis.first).days)):
            day = axis.first + timedelta(days=n)
            cumulative += days.get(day, (0, 0))[0]
            title = f"Through {day_label(day)}"
            spent_points.append(_point(n + 1, cumulative, title=title, currency=currency))
    if first_today is not None and spent > spent_points[-1]["y"]:
        # Flat until today's first spend, then up to now: the rollups know what a day spent,
        # not when, so the line starts where the spending did (not at midnight).
        before = spent_points[-1]["y"]
        title = f"First spend today ({moment_label(first_today, axis.tz, 'HH:mm')})"
        x = min(axis.at(first_today), now_x)
        if x > spent_points[-1]["x"]:
            spent_points.append(_point(x, before, title=title, currency=currency))
    now_title = f"Now ({moment_label(axis.now, axis.tz)})"
    spent_points.append(_point(now_x, spent, title=now_title, currency=currency))
    end_title = f"Period end ({moment_label(axis.stop, axis.tz)})"
    projection = [
        _point(now_x, spent, title=now_title, currency=currency),
        _point(axis.total, projected, title=end_title, currency=currency),
    ]
    ceiling_line = [
        _point(0, ceiling, title="Ceiling", currency=currency),
        _point(axis.total, ceiling, title="Ceiling", currency=currency),
    ]
    top = max(ceiling, spent, projected) * 1.08
    lines = []
    for threshold in sorted(set(thresholds)):
        amount = ceiling * threshold // 100
        if threshold == 100 or amount > top:
            continue
        title = f"{threshold}% threshold"
        line = [_point(0, amount, title=title, currency=currency)]
        line.append(_point(axis.total, amount, title=title, currency=currency))
        lines.append({"percent": threshold, "crossed": threshold in crossed, "points": line})
    markers = []
    for alert in alerts:
        amount = ceiling * alert.threshold // 100
        title = f"{alert.threshold}% reached {moment_label(alert.at, axis.tz)}"
        markers.append(_point(axis.at(alert.at), amount, title=title, currency=currency))
    return {
        "kind": "burn",
        "x": {"max": axis.total, "ticks": axis.ticks(), "unit": "hours" if axis.hours else "days"},
        "y": {"ticks": money_ticks(int(top), currency)},
        "spent": spent_points,
        "projection": projection,
        "ceiling": ceiling_line,
        "thresholds": lines,
        "alerts": markers,
    }


def bar_chart(*, labels: list[str], values: list[int], currency: str, horizontal: bool) -> dict:
    """Spend per key (already ordered) as bars."""
    return {
        "kind": "bars",
        "horizontal": horizontal,
        "labels": labels,
        "values": values,
        "valueLabels": [money(v, currency, LOCALE) for v in values],
        "ticks": money_ticks(max(values, default=0), currency),
    }
