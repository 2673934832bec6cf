"""Cron expressions as beat reads them: parsing, checking, and the tick a firing belongs to.

Fields are parsed by Celery's own `crontab` (the class beat's `DatabaseScheduler` decides with), so a tick
here is a tick there: day-of-week 0 is Sunday, names (`mon-fri`, `jan`) are allowed, and day-of-month
and day-of-week must both match (Celery's rule, unlike classic cron's "either").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import crontab
from django.core.exceptions import ValidationError
from django_celery_beat.validators import crontab_validator

FIELD_NAMES = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
# How far back the tick of a firing is looked for: a `29 2 *` on a given weekday recurs within 28 years.
SEARCH_DAYS = 366 * 28


class CronError(ValueError):
    """The expression is not five valid cron fields; the message says which field and why."""


@dataclass(frozen=True)
class CronFields:
    minute: str
    hour: str
    day_of_month: str
    month_of_year: str
    day_of_week: str

    @property
    def expression(self) -> str:
        return " ".join((self.minute, self.hour, self.day_of_month, self.month_of_year, self.day_of_week))

    def as_crontab(self) -> crontab:
        return crontab(
            minute=self.minute,
            hour=self.hour,
            day_of_month=self.day_of_month,
            month_of_year=self.month_of_year,
            day_of_week=self.day_of_week,
        )


def cron_parse(expression: str) -> CronFields:
    """Five whitespace-separated fields (`minute hour day-of-month month day-of-week`), each checked by
    Celery's parser and by django-celery-beat's validator (what its `CrontabSchedule` stores)."""
    parts = expression.split()
    if len(parts) != len(FIELD_NAMES):
        raise CronError(
            f"Must be {len(FIELD_NAMES)} fields (minute hour day-of-month month day-of-week), e.g. '*/5 * * * *'; "
            f"got {len(parts)}."
        )
    for name, value in zip(FIELD_NAMES, parts, strict=True):
        try:
            crontab(**{name: value})
        except Exception as exc:  # Celery raises ValueError and its parser's own ParseException
            raise CronError(f"Invalid {name.replace('_', '-')} field {value!r}: {exc}") from None
    fields = CronFields(*parts)
    try:
        crontab_validator(fields.expression)
    except ValidationError as exc:
        raise CronError(f"Invalid expression: {'; '.join(exc.messages)}") from None
    return fields


def timezone_parse(name: str) -> ZoneInfo:
    """An IANA time zone by name (`UTC`, `Europe/Berlin`)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"Unknown time zone {name!r}; use an IANA name such as UTC or Europe/Berlin.") from None


def cron_tick_at_or_before(fields: CronFields, tz: ZoneInfo, moment: datetime) -> datetime | None:
    """The latest tick of the schedule at or before `moment` (aware), as an aware UTC-comparable datetime
    in `tz`; None when there is none within `SEARCH_DAYS`."""
    # Celery's expanded set of each field (its stubs do not declare them).
    schedule: Any = fields.as_crontab()
    months, days, weekdays = set(schedule.month_of_year), set(schedule.day_of_month), set(schedule.day_of_week)
    hours = sorted(schedule.hour, reverse=True)
    minutes = sorted(schedule.minute, reverse=True)
    local = moment.astimezone(tz)
    day = local.date()
    for _ in range(SEARCH_DAYS):
        # Celery numbers weekdays from Sunday = 0.
        if day.month in months and day.day in days and day.isoweekday() % 7 in weekdays:
            for hour in hours:
                for minute in minutes:
                    tick = datetime.combine(day, time(hour, minute), tzinfo=tz)
                    if tick <= local:
                        return tick
        day -= timedelta(days=1)
    return None
