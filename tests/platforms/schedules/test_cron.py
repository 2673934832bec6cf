"""The tick a firing belongs to, read as beat reads the cron fields (Celery's crontab)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from platforms.schedules.cron import cron_parse, cron_tick_at_or_before

BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(
    ("cron", "moment", "tick"),
    [
        # Sunday 2026-03-01: the last weekday 09:00 was Friday's.
        ("0 9 * * mon-fri", datetime(2026, 3, 1, 12, 0, tzinfo=UTC), datetime(2026, 2, 27, 9, 0, tzinfo=UTC)),
        # A tick is its own minute: exactly on it, it is that tick.
        ("*/15 * * * *", datetime(2026, 3, 2, 10, 30, tzinfo=UTC), datetime(2026, 3, 2, 10, 30, tzinfo=UTC)),
        ("*/15 * * * *", datetime(2026, 3, 2, 10, 29, 59, tzinfo=UTC), datetime(2026, 3, 2, 10, 15, tzinfo=UTC)),
        # Celery's rule: day-of-month and day-of-week must both match (the 13th that is a Friday).
        ("0 0 13 * 5", datetime(2026, 3, 20, tzinfo=UTC), datetime(2026, 3, 13, tzinfo=UTC)),
        # Leap day, years back.
        ("0 0 29 2 *", datetime(2026, 3, 2, tzinfo=UTC), datetime(2024, 2, 29, tzinfo=UTC)),
    ],
)
def test_the_latest_tick_at_or_before_a_moment(cron, moment, tick):
    assert cron_tick_at_or_before(cron_parse(cron), ZoneInfo("UTC"), moment) == tick


def test_ticks_are_read_in_the_time_zone_across_a_summer_time_change():
    # Berlin moves to summer time on 2026-03-29: 09:00 local is 08:00 UTC before, 07:00 UTC after.
    fields = cron_parse("0 9 * * *")

    before = cron_tick_at_or_before(fields, BERLIN, datetime(2026, 3, 28, 12, tzinfo=UTC))
    after = cron_tick_at_or_before(fields, BERLIN, datetime(2026, 3, 30, 12, tzinfo=UTC))

    assert before == datetime(2026, 3, 28, 8, tzinfo=UTC)
    assert after == datetime(2026, 3, 30, 7, tzinfo=UTC)
