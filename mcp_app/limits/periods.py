"""A tenant's days and months (docs/budgets.md): what the budget counters are named by and what the burn-down sums.

``period_of(name, time_zone, now)`` is the day or month of the tenant's IANA ``time_zone`` that holds ``now``;
``period_of_day`` the one that holds a tenant's calendar day; ``current`` both of them at once. A day starts at
the tenant's midnight and a month on its first, so a day may last 23 or 25 hours. An unknown zone counts as UTC.
Pure computation: no clock (callers pass ``now``), no I/O.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


@dataclass(frozen=True, slots=True)
class Period:
    """A tenant's day or month: ``name`` "day" or "month", its first day, and when the next one starts (UTC)."""

    name: str
    start: date  # its first day, in the tenant's time zone
    resets_at: datetime  # when the next one starts (UTC)

    @property
    def expire_at(self) -> int:
        """When its counters may go (unix seconds): two days after its end, whatever the time zone."""
        end = self.start + timedelta(days=1) if self.name == "day" else next_month(self.start)
        return int(datetime.combine(end + timedelta(days=2), time(), tzinfo=UTC).timestamp())


@functools.lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; UTC when it is not one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def next_month(day: date) -> date:
    """The first day of the month after ``day``'s."""
    return (day.replace(day=1) + timedelta(days=32)).replace(day=1)


def period_of(name: str, time_zone: str, now: datetime) -> Period:
    """The ``name`` period ("day" or "month") of the tenant's ``time_zone`` that holds ``now``: computed once per
    minute and zone (every call asks it; a zone's midnight falls on a whole minute, so a minute is in one day)."""
    return _period_at(name, time_zone, math.floor(now.timestamp() / 60))


@functools.lru_cache(maxsize=1024)
def _period_at(name: str, time_zone: str, minute: int) -> Period:
    local = zone(time_zone)
    today = datetime.fromtimestamp(minute * 60, UTC).astimezone(local).date()
    start, end = (today, today + timedelta(days=1)) if name == "day" else (today.replace(day=1), next_month(today))
    return Period(name, start, datetime.combine(end, time(), tzinfo=local).astimezone(UTC))


def period_of_day(name: str, time_zone: str, day: date) -> Period:
    """The ``name`` period that holds the tenant's ``day`` (what a ``Spent`` names)."""
    noon = datetime.combine(day, time(12), tzinfo=zone(time_zone))
    return period_of(name, time_zone, noon)


def current(time_zone: str, now: datetime) -> dict[str, Period]:
    """The ``day`` and the ``month`` of ``time_zone`` that hold ``now``."""
    return {name: period_of(name, time_zone, now) for name in ("day", "month")}
