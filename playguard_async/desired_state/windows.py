"""Maintenance windows: when a Marquee's cycles may change its host.

A window opens at each time its cron expression (five fields: minute hour day month weekday)
names on the wall clock of its IANA time zone and stays open for ``duration`` of elapsed time.
``allow`` windows say when changes may be made (none: at any time); ``deny`` windows say when
they may not, and win over an allow window. Outside what they allow, a cycle runs as ``detect``
(it finds and tells, changes nothing). A Marquee's own windows replace the fleet's default
(the ``windows`` setting); an empty list means none, so always allowed.

The cron arithmetic is croniter's, the zones are the system's (zoneinfo); neither is written here.
On a daylight-saving change croniter moves a start that falls into the skipped hour to the end of
the gap (``30 2 * * *`` starts at 03:00 that night) and starts twice in a repeated hour (once on
each side of the change); a duration is elapsed time, so a window across the gap or the repeat
lasts exactly as long as any other (tested in tests/unit/test_windows.py).

A cron that can never fire (``0 0 31 2 *``: croniter accepts it, then finds no date) is refused
with the window, like any other bad value.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

CRON_FIELDS = 5

MAX_DURATION = timedelta(days=7)

OPENINGS_SEARCHED = 200
"""Window starts and ends looked at for the next opening before giving up (a deny window that
covers every allow window): enough for a week of hourly windows."""

CRONS_KEPT = 4096
"""Cron expressions whose check is kept (a fleet has a handful)."""

_PROBE_FROM = datetime(2000, 1, 1)


@functools.lru_cache(maxsize=CRONS_KEPT)
def _fires(cron: str) -> bool:
    """Whether croniter finds any date for ``cron`` (kept per expression: a fleet of 10,000
    Marquees has a handful)."""
    try:
        croniter(cron, _PROBE_FROM).get_next(datetime)
    except CroniterError:
        return False
    return True


def _check_cron(value: str) -> str:
    fields = value.split()
    if len(fields) != CRON_FIELDS:
        raise ValueError(
            f"must have {CRON_FIELDS} fields (minute hour day month weekday), found {len(fields)}"
        )
    if not croniter.is_valid(value):
        raise ValueError("is not a cron expression croniter accepts")
    cron = " ".join(fields)
    if not _fires(cron):
        raise ValueError("never fires: no date has it (a day its months lack, like 30 February)")
    return cron


def _check_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError("is not an IANA time zone known here (like Europe/Berlin, UTC)") from None
    return value


Cron = Annotated[str, AfterValidator(_check_cron)]
TimeZone = Annotated[str, AfterValidator(_check_zone)]


class Window(BaseModel):
    """One allow or deny window (see the module's doc)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["allow", "deny"]
    cron: Cron
    duration: Annotated[timedelta, Field(gt=timedelta(0), le=MAX_DURATION)]
    timezone: TimeZone = "UTC"

    def last_start(self, now: datetime) -> datetime:
        """The latest start at or before ``now`` (aware), in UTC."""
        # croniter's get_prev is strictly before its base: a base one second on, so a start at
        # ``now`` itself counts; one that is then past ``now`` (now had a fraction) is skipped.
        # Added in UTC: wall-clock arithmetic would lose which side of a repeated hour it is on.
        base = (now + timedelta(seconds=1)).astimezone(ZoneInfo(self.timezone))
        starts = croniter(self.cron, base)
        start: datetime = starts.get_prev(datetime)
        if start > now:
            start = starts.get_prev(datetime)
        return start.astimezone(UTC)

    def next_start(self, now: datetime) -> datetime:
        """The first start after ``now`` (aware), in UTC."""
        start: datetime = croniter(self.cron, now.astimezone(ZoneInfo(self.timezone))).get_next(
            datetime
        )
        return start.astimezone(UTC)

    def is_open(self, now: datetime) -> bool:
        return now < self.last_start(now) + self.duration


def allows(windows: Sequence[Window], now: datetime) -> bool:
    """Whether ``windows`` let a cycle change its host at ``now``: inside an allow window (or
    there is none) and in no deny window."""
    allowing = [window for window in windows if window.kind == "allow"]
    if allowing and not any(window.is_open(now) for window in allowing):
        return False
    return not any(window.is_open(now) for window in windows if window.kind == "deny")


def next_opening(windows: Sequence[Window], now: datetime) -> datetime | None:
    """When ``windows`` next allow changes at or after ``now`` (``now`` itself when they do);
    None when none is found among the next ``OPENINGS_SEARCHED`` starts and ends."""
    if allows(windows, now):
        return now
    candidates: set[datetime] = set()
    for window in windows:
        start = window.last_start(now)
        for _ in range(OPENINGS_SEARCHED // max(1, len(windows))):
            # An allow window opens at its start; a deny window lets go at its end.
            candidates.add(start if window.kind == "allow" else start + window.duration)
            start = window.next_start(start)
    for moment in sorted(candidate for candidate in candidates if candidate > now):
        if allows(windows, moment):
            return moment
    return None
