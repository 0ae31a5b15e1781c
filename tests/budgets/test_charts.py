"""budgets/charts.py: what the burn and bar charts show (pure: no database, no clock)."""

from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from budgets import charts, rules

BERLIN = ZoneInfo("Europe/Berlin")


def axis(period: str, now: datetime, tz=BERLIN) -> charts.PeriodAxis:
    first, end = rules.period_days(period, rules.local_today(now, tz))
    start, stop = rules.period_bounds(period, now, tz)
    return charts.PeriodAxis(
        period=period, first=first, end=end, tz=tz, start=start, stop=stop, now=now
    )


@pytest.mark.parametrize(
    ("top", "ticks"),
    [
        (0, [0, 1]),
        (7, [0, 2, 4, 6, 8]),
        (54_000, [0, 20_000, 40_000, 60_000]),
        (5_000, [0, 1_000, 2_000, 3_000, 4_000, 5_000]),
        (12_500, [0, 2_500, 5_000, 7_500, 10_000, 12_500]),
    ],
)
def test_nice_ticks_end_at_or_above_the_top(top, ticks):
    assert charts.nice_ticks(top) == ticks


def test_money_ticks_are_formatted_in_the_currency_by_babel():
    assert [t["label"] for t in charts.money_ticks(200_000, "USD")][:3] == ["$0", "$500", "$1,000"]
    assert charts.money_ticks(250_000_000, "EUR")[1]["label"] == "€500K"
    assert charts.money_ticks(200, "USD")[1]["label"] == "$0.50"
    assert charts.money_ticks(500, "JPY")[1]["label"] == "¥100"  # no minor unit


def test_a_month_axis_counts_days_and_labels_every_fifth():
    now = datetime(2026, 12, 3, 11, 0, tzinfo=UTC)  # 12:00 in Berlin
    month = axis("month", now)
    assert month.total == 31
    assert month.at(now) == pytest.approx(2.5)
    labels = [t["label"] for t in month.ticks()]
    assert labels[0] == "Dec 1" and labels[5] == "Dec 6" and labels[31] == "Jan 1"
    assert labels[30] == "" and labels[1] == ""


def test_a_day_axis_is_hours_and_a_dst_day_has_23():
    spring = datetime(2026, 3, 29, 10, 0, tzinfo=UTC)  # Berlin springs forward at 02:00
    day = axis("day", spring)
    assert day.total == 23
    assert day.ticks()[1] == {"value": 3, "label": "04:00"}  # 3 hours after local midnight


def test_the_burn_chart_holds_the_cumulative_spend_projection_ceiling_and_thresholds():
    now = datetime(2026, 12, 3, 11, 0, tzinfo=UTC)
    month = axis("month", now)
    days = {date(2026, 12, 1): (100, 5), date(2026, 12, 2): (250, 9), date(2026, 12, 3): (50, 1)}
    alert = SimpleNamespace(threshold=80, at=datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    start, end = rules.period_bounds("month", now, BERLIN)
    projected = rules.projected(400, start, end, now)
    data = charts.burn_chart(
        axis=month,
        days=days,
        spent=400,
        projected=projected,
        ceiling=500,
        thresholds=[80, 100, 200],
        crossed=[80],
        alerts=[alert],
        currency="USD",
    )
    assert [(p["x"], p["y"]) for p in data["spent"]] == [(0, 0), (1, 100), (2, 350), (2.5, 400)]
    assert data["spent"][-1]["v"] == "$4.00" and data["spent"][2]["t"] == "Through Dec 2"
    assert [(p["x"], p["y"]) for p in data["projection"]] == [(2.5, 400), (31, projected)]
    assert [p["y"] for p in data["ceiling"]] == [500, 500]
    # 100% is the ceiling line itself; 200% is within the axis the projection needs
    assert [(t["percent"], t["crossed"]) for t in data["thresholds"]] == [(80, True), (200, False)]
    assert data["alerts"][0]["y"] == 400
    assert data["alerts"][0]["x"] == pytest.approx(1 + 13 / 24, abs=1e-3)  # 13:00 in Berlin
    assert data["y"]["ticks"][-1]["value"] >= projected


def test_bars_carry_their_formatted_values():
    data = charts.bar_chart(labels=["a", "b"], values=[1234, 5], currency="USD", horizontal=True)
    assert data["valueLabels"] == ["$12.34", "$0.05"] and data["horizontal"] is True


def test_a_week_axis_starts_on_monday():
    now = datetime(2026, 12, 3, 11, 0, tzinfo=UTC)  # a Thursday
    week = axis("week", now)
    assert week.first == date(2026, 11, 30) and week.total == 7
    assert [t["label"] for t in week.ticks()][:2] == ["Mon 30", "Tue 1"]
    assert week.at(now - timedelta(days=10)) == 0.0  # clamped to the period


def _burn(ax, *, days=None, spent, first_today=None):
    return charts.burn_chart(
        axis=ax,
        days=days or {},
        spent=spent,
        projected=spent,
        ceiling=1000,
        thresholds=[],
        crossed=[],
        alerts=[],
        currency="USD",
        first_today=first_today,
    )


def test_a_day_budget_draws_todays_spend_from_its_first_spend_not_from_midnight():
    now = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)  # 16:00 in Berlin
    day = axis("day", now)
    first = datetime(2026, 12, 3, 14, 30, tzinfo=UTC)  # 15:30 in Berlin
    data = _burn(day, spent=1550, first_today=first)
    assert [(p["x"], p["y"]) for p in data["spent"]] == [(0, 0), (15.5, 0), (16.0, 1550)]
    assert data["spent"][1]["t"] == "First spend today (15:30)"
    # Without a known first spend (or nothing spent today) the line is as it was.
    assert [(p["x"], p["y"]) for p in _burn(day, spent=1550)["spent"]] == [(0, 0), (16.0, 1550)]
    assert [(p["x"], p["y"]) for p in _burn(day, spent=0, first_today=first)["spent"]] == [
        (0, 0),
        (16.0, 0),
    ]


def test_a_month_budget_stays_flat_from_the_day_boundary_until_todays_first_spend():
    now = datetime(2026, 12, 3, 11, 0, tzinfo=UTC)  # 12:00 in Berlin
    month = axis("month", now)
    days = {date(2026, 12, 1): (100, 5), date(2026, 12, 2): (250, 9), date(2026, 12, 3): (50, 1)}
    first = datetime(2026, 12, 3, 5, 0, tzinfo=UTC)  # 06:00 in Berlin: a quarter of the day
    data = _burn(month, days=days, spent=400, first_today=first)
    assert [(p["x"], p["y"]) for p in data["spent"]] == [
        (0, 0),
        (1, 100),
        (2, 350),
        (2.25, 350),
        (2.5, 400),
    ]
