"""The pure arithmetic of budgets: calendar periods in a time zone, percent, the linear
projection and which thresholds a spend has reached."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from budgets import rules

BERLIN = ZoneInfo("Europe/Berlin")


def test_a_day_runs_from_local_midnight_to_the_next():
    start, end = rules.period_bounds("day", datetime(2026, 12, 2, 23, 30, tzinfo=UTC), BERLIN)
    assert start.isoformat() == "2026-12-03T00:00:00+01:00"
    assert end.isoformat() == "2026-12-04T00:00:00+01:00"


def test_a_week_runs_from_monday():
    # Thursday 2026-12-03: the week of Monday 2026-11-30.
    start, end = rules.period_bounds("week", datetime(2026, 12, 3, 12, tzinfo=UTC), BERLIN)
    assert start.isoformat() == "2026-11-30T00:00:00+01:00"
    assert end.isoformat() == "2026-12-07T00:00:00+01:00"
    assert rules.period_days("week", date(2026, 11, 30)) == (date(2026, 11, 30), date(2026, 12, 7))
    assert rules.period_days("week", date(2026, 12, 6)) == (date(2026, 11, 30), date(2026, 12, 7))


def test_a_month_runs_from_the_first_and_december_ends_in_january():
    start, end = rules.period_bounds("month", datetime(2026, 12, 31, 23, 30, tzinfo=UTC), BERLIN)
    assert start.isoformat() == "2027-01-01T00:00:00+01:00"  # already January in Berlin
    assert end.isoformat() == "2027-02-01T00:00:00+01:00"
    assert rules.period_days("month", date(2026, 12, 15)) == (date(2026, 12, 1), date(2027, 1, 1))
    assert rules.period_days("month", date(2028, 2, 29)) == (date(2028, 2, 1), date(2028, 3, 1))


def test_periods_keep_local_midnight_across_daylight_saving():
    start, end = rules.period_bounds("month", datetime(2026, 3, 15, tzinfo=UTC), BERLIN)
    assert start.isoformat() == "2026-03-01T00:00:00+01:00"
    assert end.isoformat() == "2026-04-01T00:00:00+02:00"
    assert end.astimezone(UTC) - start.astimezone(UTC) == timedelta(days=31, hours=-1)
    # The projection measures real time: the month is 743 hours, half of it elapsed doubles.
    halfway = start.astimezone(UTC) + timedelta(hours=743) / 2
    assert rules.projected(1000, start, end, halfway) == 2000


def test_half_hour_zones_are_whole_local_days():
    kolkata = ZoneInfo("Asia/Kolkata")
    start, _ = rules.period_bounds("day", datetime(2026, 12, 2, 18, 45, tzinfo=UTC), kolkata)
    assert start.isoformat() == "2026-12-03T00:00:00+05:30"


def test_an_unknown_zone_reads_as_utc():
    assert rules.zone("Mars/Olympus") == ZoneInfo("UTC")
    assert rules.zone("") == ZoneInfo("UTC")


@pytest.mark.parametrize(
    ("spent", "ceiling", "expected"),
    [
        (1234, 50000, 2.47),
        (0, 100, 0.0),
        (1, 3, 33.33),
        (2, 3, 66.67),
        (150, 100, 150.0),
        (-5, 100, -5.0),
        (1, 8, 12.5),
        (1, 800, 0.13),
    ],
)
def test_percent_has_two_decimals_rounded_half_up(spent, ceiling, expected):
    assert rules.percent(spent, ceiling) == expected


def test_the_projection_is_linear_to_the_period_end():
    start = datetime(2026, 12, 1, tzinfo=UTC)
    end = datetime(2026, 12, 31, tzinfo=UTC)  # 30 days
    assert rules.projected(1000, start, end, start + timedelta(days=10)) == 3000
    assert rules.projected(1000, start, end, start + timedelta(days=7)) == 4286  # 4285.7
    assert rules.projected(1000, start, end, start) == 1000  # nothing elapsed yet
    assert rules.projected(1000, start, end, end + timedelta(days=1)) == 1000
    assert rules.projected(0, start, end, start + timedelta(days=3)) == 0


def test_a_threshold_is_reached_at_exactly_its_share():
    assert rules.crossed([80, 100], 79, 100) == []
    assert rules.crossed([80, 100], 80, 100) == [80]
    assert rules.crossed([100, 80], 100, 100) == [80, 100]
    assert rules.crossed([80, 100, 150], 1000, 100) == [80, 100, 150]
    assert rules.crossed([1], 1, 1000) == []  # 0.1 % is below 1 %
    assert rules.crossed([33], 33, 100) == [33]
    assert rules.crossed([50], 1, 3) == []  # integers: no float error at the edge
    assert rules.crossed([50], 3, 6) == [50]


def test_fits_under_a_ceiling_including_the_estimate():
    assert rules.fits(spent=420, estimate=80, ceiling=500)
    assert not rules.fits(spent=420, estimate=81, ceiling=500)
    assert rules.fits(spent=10**9, estimate=1, ceiling=None)
