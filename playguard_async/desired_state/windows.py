"""Maintenance windows: when a Marquee's cycles may change its host.

A window opens at each time its cron expression (five fields: minute hour day month weekday)
names on the wall clock of its IANA time zone and stays open for ``duration`` of elapsed time.
``allow`` windows say when changes may be made (none: at any time); ``deny`` windows say when
they may not, and win over an allow window. Outside what they allow, a cycle runs as ``detect``
(it finds and tells, changes nothing). A Marquee's own windows replace the fleet's default
(the ``windows`` setting); an empty list means none, so always allowed.

The cron arithmetic is croniter's, the zones are the system's (zoneinfo); neither is written here.
On a daylight-saving change croniter moves a start that falls into the skipped hour to the end of
the gap (``30 2 * * *`` starts at 03:00 that night) or, for a cron that runs every hour, drops it
(``1 * * * *`` has no 02:01 and next starts at 03:01), and starts twice in a repeated hour (once
on each side of the change); a duration is elapsed time, so a window across the gap or the repeat
lasts exactly as long as any other (tested in tests/unit/test_windows.py).

A cron that can never fire (``0 0 31 2 *``: croniter accepts it, then finds no date) is refused
with the window, like any other bad value. A window set's answer is computed once and kept until
the moment it can next change (the next start or end that matters), so asking on every cycle
costs a dictionary look-up, not a calendar search (bench/README.md, "Maintenance windows"). An
answer croniter cannot give (a window that slipped past the check) is ``closed``, with the
error: the cycle then changes nothing, and nothing raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

CRON_FIELDS = 5

MAX_DURATION = timedelta(days=7)

SEARCH_AHEAD = timedelta(days=4 * 366)
"""How far ahead the next opening is looked for: far enough for a window on 29 February."""

SEARCH_STEPS = 200
"""Jumps a search makes at most, each to the next start of an allow window or past the deny
windows that cover a moment. Ordinary sets take a few; this bounds the loop's time for a deny
window that covers the allow windows for days on end (``* * * * *`` for a minute: always), which
is then reported as no opening found ahead."""

RETRY_AFTER = timedelta(minutes=1)
"""How long an answer croniter could not give is kept before it is asked again."""

SCHEDULES_KEPT = 4096
"""Window sets whose answer is kept (a fleet has a few: the default and Marquees' own)."""

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

    def describe(self) -> str:
        return f"{self.kind} {self.cron!r} for {self.duration} in {self.timezone}"

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


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a window set says from ``since`` until just before ``until``: whether changes are
    allowed and, when not, when they next are."""

    allowed: bool
    since: datetime
    until: datetime
    opening: datetime | None = None
    """Closed: the next opening (None: none found ahead, see ``SEARCH_AHEAD``, ``SEARCH_STEPS``)."""
    error: str | None = None
    """Why croniter gave no answer (the set is then closed until ``until``); None when it did."""


def verdict(windows: Sequence[Window], now: datetime) -> Verdict:
    """What ``windows`` say at ``now`` (aware): computed at most once per window set until the
    moment its answer can change, so asking it for every cycle costs no calendar arithmetic.
    Never raises for a window's sake: an answer croniter cannot give is closed, with the error."""
    if not windows:
        return Verdict(allowed=True, since=now, until=now)
    return _schedule(tuple(windows)).at(now)


def allows(windows: Sequence[Window], now: datetime) -> bool:
    """Whether ``windows`` let a cycle change its host at ``now``: inside an allow window (or
    there is none) and in no deny window."""
    return verdict(windows, now).allowed


def next_opening(windows: Sequence[Window], now: datetime) -> datetime | None:
    """When ``windows`` next allow changes at or after ``now`` (``now`` itself when they do);
    None when none is found within ``SEARCH_AHEAD`` and ``SEARCH_STEPS``."""
    found = verdict(windows, now)
    return now if found.allowed else found.opening


@functools.lru_cache(maxsize=SCHEDULES_KEPT)
def _schedule(windows: tuple[Window, ...]) -> _Schedule:
    return _Schedule(windows)


class _Schedule:
    """One window set and its last verdict, kept while it holds."""

    def __init__(self, windows: tuple[Window, ...]) -> None:
        self.allowing = tuple(window for window in windows if window.kind == "allow")
        self.denying = tuple(window for window in windows if window.kind == "deny")
        self._last: Verdict | None = None

    def at(self, now: datetime) -> Verdict:
        last = self._last
        if last is not None and last.since <= now < last.until:
            return last
        try:
            found = self._verdict(now)
        except _Unanswered as exc:
            found = Verdict(allowed=False, since=now, until=now + RETRY_AFTER, error=str(exc))
        self._last = found
        return found

    def _verdict(self, now: datetime) -> Verdict:
        if self._allowed(now):
            return Verdict(allowed=True, since=now, until=self._closing(now))
        opening, closed_until = self._opening(now)
        return Verdict(allowed=False, since=now, until=closed_until, opening=opening)

    def _allowed(self, now: datetime) -> bool:
        if self.allowing and not any(_is_open(window, now) for window in self.allowing):
            return False
        return not any(_is_open(window, now) for window in self.denying)

    def _opening(self, now: datetime) -> tuple[datetime | None, datetime]:
        """The first moment at or after ``now`` the set allows (None: none found), and the
        moment until which it is known closed."""
        horizon = now + SEARCH_AHEAD
        moment = allowed_until = now
        for _ in range(SEARCH_STEPS):
            if moment >= horizon:
                return None, moment
            if self.allowing and moment >= allowed_until:
                reach = max(_end(window, moment) for window in self.allowing)
                if reach <= moment:
                    # No allow window covers it: none can before one of them starts.
                    moment = min(_next_start(window, moment) for window in self.allowing)
                    continue
                allowed_until = reach
            # Allowed but for the deny windows covering it: the earliest way out is the latest
            # end among them (each window's interval at ``moment`` is its last start's).
            free = max((_end(window, moment) for window in self.denying), default=moment)
            if free <= moment:
                return moment, moment
            moment = free
        return None, moment

    def _closing(self, now: datetime) -> datetime:
        """The first moment after ``now`` (allowed) that the set may not allow: the next deny
        window's start, or the end of the allow windows' cover, whichever comes first (as far
        as ``SEARCH_AHEAD`` and ``SEARCH_STEPS`` look; the answer is asked again then)."""
        until = min([*(_next_start(window, now) for window in self.denying), now + SEARCH_AHEAD])
        if not self.allowing:
            return until
        covered = now
        for _ in range(SEARCH_STEPS):
            if covered >= until:
                return until
            reach = max(_end(window, covered) for window in self.allowing)
            if reach <= covered:
                return covered
            covered = reach
        return min(covered, until)


class _Unanswered(Exception):
    """croniter gave no answer for a window (one that should have been refused at load)."""


def _asked(window: Window, question: Callable[[datetime], datetime], now: datetime) -> datetime:
    """``question(now)``, one of ``window``'s; whatever croniter raises (CroniterBadDateError
    for a date it cannot find, or a failure of its own) becomes ``_Unanswered`` naming the
    window: a window is data, and no cycle or page should fail for it."""
    try:
        return question(now)
    except Exception as exc:
        raise _Unanswered(f"window {window.describe()}: {type(exc).__name__}: {exc}") from exc


def _is_open(window: Window, now: datetime) -> bool:
    return now < _end(window, now)


def _end(window: Window, now: datetime) -> datetime:
    """The end of the window's interval that started last at or before ``now`` (at or before
    ``now`` itself when it does not cover ``now``)."""
    return _asked(window, window.last_start, now) + window.duration


def _next_start(window: Window, now: datetime) -> datetime:
    return _asked(window, window.next_start, now)
