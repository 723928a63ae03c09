"""Maintenance windows with a fixed clock: allow and deny, the daylight-saving edges of
Europe/Berlin (2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00), the next opening (and the
kept answers along a clock) against a minute-by-minute walk of generated window sets, and
windows refused with one line naming the value, in the inventory, the PostgreSQL rows and the
settings: impossible crons among them. A window that croniter cannot answer for never raises
into a cycle or a page."""

from __future__ import annotations

import bisect
import functools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest
import yaml
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from structlog.testing import capture_logs

from playguard_async.desired_state.model import Inventory, InventoryError, Marquee
from playguard_async.desired_state.postgres.validation import RowMemo, validate_snapshot
from playguard_async.desired_state.windows import (
    SEARCH_AHEAD,
    Window,
    allows,
    next_opening,
    verdict,
)
from playguard_async.desired_state.yaml_source import YamlInventorySource
from playguard_async.engine.cycle import Cycle
from playguard_async.engine.services import CycleServices
from playguard_async.service import story
from playguard_async.settings import Settings, SettingsError, load_settings
from tests.support.pg_inventory import marquee_rows

BERLIN = "Europe/Berlin"


def at(text: str) -> datetime:
    """A UTC instant from ``2026-03-29 01:00``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def window(cron: str, hours: float, kind: str = "allow", zone: str = BERLIN) -> Window:
    return Window(kind=kind, cron=cron, duration=timedelta(hours=hours), timezone=zone)  # type: ignore[arg-type]


# (window, UTC instant, open?) - local Berlin time in the comment.
DST_EDGES = [
    # Spring: 02:00 CET jumps to 03:00 CEST. A window from 01:00 for 3 h spans the skipped hour
    # and lasts 3 h of elapsed time: 01:00 CET (00:00 UTC) to 05:00 CEST (03:00 UTC).
    (window("0 1 * * *", 3), "2026-03-28 23:59:59", False),  # 00:59:59 CET
    (window("0 1 * * *", 3), "2026-03-29 00:00", True),  # 01:00 CET
    (window("0 1 * * *", 3), "2026-03-29 01:30", True),  # 03:30 CEST, past the gap
    (window("0 1 * * *", 3), "2026-03-29 02:59:59", True),  # 04:59:59 CEST
    (window("0 1 * * *", 3), "2026-03-29 03:00", False),  # 05:00 CEST: 3 h elapsed
    # A window that starts in the skipped hour (02:30) starts at the end of the gap, 03:00 CEST.
    (window("30 2 * * *", 1), "2026-03-29 00:59:59", False),  # 01:59:59 CET
    (window("30 2 * * *", 1), "2026-03-29 01:00", True),  # 03:00 CEST
    (window("30 2 * * *", 1), "2026-03-29 01:59:59", True),  # 03:59:59 CEST
    (window("30 2 * * *", 1), "2026-03-29 02:00", False),  # 04:00 CEST
    (window("30 2 * * *", 1), "2026-03-30 00:45", True),  # next day, 02:45 CEST as usual
    # Autumn: 03:00 CEST falls back to 02:00 CET; 02:30 comes twice, and so does the window.
    (window("30 2 * * *", 1 / 3), "2026-10-25 00:29:59", False),  # 02:29:59 CEST
    (window("30 2 * * *", 1 / 3), "2026-10-25 00:35", True),  # 02:35 CEST (first)
    (window("30 2 * * *", 1 / 3), "2026-10-25 00:50", False),  # 02:50 CEST
    (window("30 2 * * *", 1 / 3), "2026-10-25 01:35", True),  # 02:35 CET (repeated)
    (window("30 2 * * *", 1 / 3), "2026-10-25 01:50", False),  # 02:50 CET
    # A window from 01:00 for 3 h across the repeated hour: 3 h elapsed, ending at 03:00 CET.
    (window("0 1 * * *", 3), "2026-10-25 01:59:59", True),  # 02:59:59 CET
    (window("0 1 * * *", 3), "2026-10-25 02:00", False),  # 03:00 CET
    # UTC and a zone far from it, on an ordinary day.
    (window("0 22 * * 5", 2, zone="UTC"), "2026-12-04 22:00", True),  # Friday
    (window("0 22 * * 5", 2, zone="UTC"), "2026-12-05 00:00", False),
    (window("0 9 * * 1-5", 8, zone="Asia/Tokyo"), "2026-12-04 00:00", True),  # 09:00 JST Fri
    (window("0 9 * * 1-5", 8, zone="Asia/Tokyo"), "2026-12-05 00:00", False),  # Saturday
]


@pytest.mark.parametrize(("allowing", "instant", "expected"), DST_EDGES)
def test_a_window_is_open_exactly_for_its_duration_across_dst_changes(
    allowing: Window, instant: str, expected: bool
) -> None:
    assert allowing.is_open(at(instant)) is expected
    assert allows([allowing], at(instant)) is expected


def test_a_deny_window_wins_over_an_allow_window_and_no_windows_allow_always() -> None:
    nights = window("0 0 * * *", 6, zone="UTC")
    backup = window("0 2 * * *", 1, kind="deny", zone="UTC")
    assert allows([], at("2026-12-05 12:00"))
    assert allows([nights, backup], at("2026-12-05 01:00"))
    assert not allows([nights, backup], at("2026-12-05 02:30"))
    assert allows([nights, backup], at("2026-12-05 03:00"))
    assert not allows([nights, backup], at("2026-12-05 12:00"))
    assert not allows([backup], at("2026-12-05 02:00"))
    assert allows([backup], at("2026-12-05 12:00")), "deny windows alone allow the rest"


@pytest.mark.parametrize(
    ("windows", "instant", "opens"),
    [
        ([window("0 0 * * *", 6, zone="UTC")], "2026-12-05 12:00", "2026-12-06 00:00"),
        ([window("0 0 * * *", 6, zone="UTC")], "2026-12-05 01:00", "2026-12-05 01:00"),
        (  # the deny window covers the allow window's start: it opens when the deny ends
            [window("0 0 * * *", 6, zone="UTC"), window("0 0 * * *", 2, "deny", "UTC")],
            "2026-12-05 12:00",
            "2026-12-06 02:00",
        ),
        ([window("0 2 * * *", 1, "deny", "UTC")], "2026-12-05 02:30", "2026-12-05 03:00"),
        ([window("30 2 * * *", 1)], "2026-03-28 12:00", "2026-03-29 01:00"),  # 03:00 CEST
        (  # a deny window that always covers the allow window: none found
            [window("0 0 * * *", 1, zone="UTC"), window("0 * * * *", 1, "deny", "UTC")],
            "2026-12-05 12:00",
            None,
        ),
    ],
)
def test_next_opening(windows: list[Window], instant: str, opens: str | None) -> None:
    expected = None if opens is None else at(opens)
    assert next_opening(windows, at(instant)) == expected


BAD_WINDOWS = [
    ({"cron": "0 2 * * 6 1"}, "must have 5 fields (minute hour day month weekday), found 6"),
    ({"cron": "0 2 * *"}, "must have 5 fields (minute hour day month weekday), found 4"),
    ({"cron": "61 2 * * *"}, "is not a cron expression croniter accepts"),
    ({"cron": "@daily"}, "must have 5 fields"),
    ({"timezone": "Mars/Olympus"}, "is not an IANA time zone known here"),
    ({"timezone": "../../etc/passwd"}, "is not an IANA time zone known here"),
    ({"timezone": ""}, "is not an IANA time zone known here"),
    ({"duration": 0}, "greater than 0"),
    ({"duration": "soon"}, "valid timedelta"),
    ({"duration": 8 * 86400}, "less than or equal to 7 days"),
    ({"kind": "maybe"}, "'allow' or 'deny'"),
    ({"extra": 1}, "Extra inputs are not permitted"),
]
GOOD = {"kind": "allow", "cron": "0 2 * * 6", "duration": 7200, "timezone": BERLIN}


@pytest.mark.parametrize(("change", "reason"), BAD_WINDOWS)
def test_a_bad_window_is_refused_naming_the_reason(change: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        Window.model_validate({**GOOD, **change})


@pytest.mark.parametrize(("change", "reason"), BAD_WINDOWS[:6])
async def test_a_bad_window_in_the_inventory_is_one_line_naming_file_line_and_value(
    tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    marquee = {"name": "m1", "host": "127.0.0.1", "user": "u", "identity_file": "id",
               "known_hosts": "kh", "windows": [{**GOOD, **change}]}  # fmt: skip
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"marquees": [marquee]}), encoding="utf-8")
    with pytest.raises(InventoryError) as refused:
        await YamlInventorySource(path).load()
    [problem] = refused.value.problems
    assert problem.startswith(f"{path}:")
    assert "marquees[0].windows[0]." in problem
    assert reason in problem
    assert repr(next(iter(change.values()))) in problem


@pytest.mark.parametrize(("change", "reason"), BAD_WINDOWS[:6])
def test_a_bad_fleet_window_in_the_settings_is_refused_naming_the_value(
    monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], reason: str
) -> None:
    monkeypatch.setenv("PLAYGUARD_WINDOWS", json.dumps([{**GOOD, **change}]))
    with pytest.raises(SettingsError) as refused:
        load_settings(None)
    assert reason in str(refused.value)
    assert str(next(iter(change.values()))) in str(refused.value)


# --- The next opening against a walk of the wall clock, minute by minute -------------------------

MINUTE = timedelta(minutes=1)
WALKED = timedelta(days=3)
"""How far ahead the reference walks: the exactness checked is within it."""
ZONES = ("UTC", BERLIN, "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe")
# Daylight-saving changes, UTC: Berlin's two, New York's two, Lord Howe's half-hour ones.
CHANGES = ("2026-03-29 01:00", "2026-10-25 01:00", "2026-03-08 07:00", "2026-11-01 06:00",
           "2026-04-04 15:00", "2026-10-03 15:30", "2026-12-05 12:00")  # fmt: skip


class WalkedSet:
    """A window set's answers found by walking the wall clock minute by minute, without croniter's
    search: a window starts at each UTC minute whose wall-clock minute its cron names (in a
    repeated hour: on both sides), and is open from a start for its duration. At the end of a
    skipped hour croniter alone says whether a skipped start moved there (``30 2 * * *``: 03:00)
    or was dropped (``1 * * * *``: no start until 03:01): its rule is no simple one."""

    def __init__(self, windows: list[Window], now: datetime) -> None:
        self.windows = windows
        first = now.replace(second=0, microsecond=0) - max(w.duration for w in windows) - MINUTE
        minutes = int((now + WALKED - first) / MINUTE) + 2
        self.grid = [first + index * MINUTE for index in range(minutes)]
        self.starts = [[m for m in self.grid if self._starts(window, m)] for window in windows]

    @staticmethod
    def _starts(window: Window, minute: datetime) -> bool:
        zone = ZoneInfo(window.timezone)
        wall = minute.astimezone(zone).replace(tzinfo=None)
        before = (minute - MINUTE).astimezone(zone).replace(tzinfo=None)
        if wall <= before:  # the clock went back: this wall minute again
            return _names(window.cron, wall)
        if wall - before > MINUTE:  # the end of a skipped hour
            return window.last_start(minute) == minute
        return _names(window.cron, wall)

    def is_open(self, index: int, instant: datetime) -> bool:
        starts = self.starts[index]
        latest = bisect.bisect_right(starts, instant) - 1
        return latest >= 0 and instant < starts[latest] + self.windows[index].duration

    def allows(self, instant: datetime) -> bool:
        kinds = [(w.kind, self.is_open(i, instant)) for i, w in enumerate(self.windows)]
        allowing = [is_open for kind, is_open in kinds if kind == "allow"]
        if allowing and not any(allowing):
            return False
        return not any(is_open for kind, is_open in kinds if kind == "deny")

    def next_opening(self, now: datetime) -> datetime | None:
        """The first allowed moment from ``now`` within ``WALKED`` (every start and end is on a
        whole minute, so only ``now`` and whole minutes after it are candidates)."""
        candidates = [now, *(m for m in self.grid if now < m <= now + WALKED)]
        return next((moment for moment in candidates if self.allows(moment)), None)


@functools.cache
def _fields(cron: str) -> list[list[int | str]]:
    fields: list[list[int | str]] = croniter.expand(cron)[0]
    return fields


def _names(cron: str, wall: datetime) -> bool:
    """Whether ``cron`` names the wall-clock minute ``wall`` (cron's rule: day of month and day of
    week both restricted, either will do)."""
    minutes, hours, days, months, weekdays = _fields(cron)
    if wall.minute not in minutes and minutes != ["*"]:
        return False
    if (wall.hour not in hours and hours != ["*"]) or (
        wall.month not in months and months != ["*"]
    ):
        return False
    day, weekday = wall.day in days, wall.isoweekday() % 7 in weekdays
    if days == ["*"] or weekdays == ["*"]:
        return (days == ["*"] or day) and (weekdays == ["*"] or weekday)
    return day or weekday


def _field(low: int, high: int, steps: tuple[int, ...]) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    return st.one_of(
        st.just("*"),
        st.sampled_from(steps).map(lambda step: f"*/{step}"),
        number.map(str),
        st.tuples(number, number).map(lambda pair: f"{min(pair)}-{max(pair)}"),
        st.tuples(number, number).map(lambda pair: f"{pair[0]},{pair[1]}"),
    )


CRONS = st.tuples(
    _field(0, 59, (2, 5, 10, 15, 20, 30)),
    _field(0, 23, (2, 3, 4, 6, 12)),
    st.one_of(st.just("*"), st.just("*"), _field(1, 28, (2, 7))),
    st.just("*"),
    st.one_of(st.just("*"), st.just("*"), st.just("1-5"), _field(0, 6, (2,))),
).map(" ".join)
DURATIONS = st.one_of(st.integers(1, 10), st.integers(1, 180), st.integers(1, 36 * 60)).map(
    lambda minutes: timedelta(minutes=minutes)
)
WINDOWS = st.builds(
    Window,
    kind=st.sampled_from(["allow", "deny"]),
    cron=CRONS,
    duration=DURATIONS,
    timezone=st.sampled_from(ZONES),
)
INSTANTS = st.builds(
    lambda change, offset: at(change) + timedelta(microseconds=offset),
    st.sampled_from(CHANGES),
    st.integers(-2 * 86400 * 10**6, 86400 * 10**6),
)
FREQUENT_DENY = st.builds(
    lambda step, minutes, zone: Window(
        kind="deny", cron=f"*/{step} * * * *", duration=timedelta(minutes=minutes), timezone=zone
    ),
    st.sampled_from([2, 5, 10, 15, 20, 30]),
    st.integers(1, 29),
    st.sampled_from(ZONES),
).filter(lambda w: w.duration < timedelta(minutes=int(w.cron.split()[0][2:])))
"""Deny windows every few minutes that leave a gap each time."""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    windows=st.one_of(
        st.lists(WINDOWS, min_size=1, max_size=4),
        st.tuples(WINDOWS, FREQUENT_DENY).map(list),
    ),
    now=INSTANTS,
    steps=st.lists(st.integers(1, 6 * 3600 * 10**6), min_size=1, max_size=8),
)
def test_next_opening_and_allows_match_a_walk_of_the_clock_minute_by_minute(
    windows: list[Window], now: datetime, steps: list[int]
) -> None:
    walked = WalkedSet(windows, now)
    found = verdict(windows, now)
    expected = walked.next_opening(now)
    assert found.error is None
    assert found.allowed is walked.allows(now)
    opening = next_opening(windows, now)
    if found.opening is None and not found.allowed and found.until < now + SEARCH_AHEAD:
        # The search gave up after SEARCH_STEPS (deny windows covering for days on end): what
        # it claims, closed until ``until``, must hold.
        assert not any(walked.allows(m) for m in walked.grid if now <= m < found.until)
    elif expected is not None:
        assert opening == expected
    else:
        assert opening is None or opening > now + WALKED
    # Asked along a clock, as cycles ask: the kept answer is right at every moment.
    moment = now
    for step in steps:
        moment += timedelta(microseconds=step)
        if moment > now + WALKED:
            break
        assert allows(windows, moment) is walked.allows(moment), moment


@pytest.mark.parametrize(
    ("windows", "instant", "opens"),
    [
        (  # the issue's: 02:04 Berlin tomorrow (01:04 UTC), not "no opening found"
            [window("0 2 * * *", 1), window("*/5 * * * *", 4 / 60, "deny")],
            "2026-12-05 12:00",
            "2026-12-06 01:04",
        ),
        (
            [window("0 2 * * *", 1), window("*/10 * * * *", 9 / 60, "deny")],
            "2026-12-05 12:00",
            "2026-12-06 01:09",
        ),
        (  # a deny window every minute for 59 s: open in the last second of each minute
            [window("0 2 * * *", 1, zone="UTC"), window("* * * * *", 59 / 3600, "deny", "UTC")],
            "2026-12-05 12:00",
            "2026-12-06 02:00:59",
        ),
        (  # every 5 minutes for 5: always closed
            [window("0 2 * * *", 1, zone="UTC"), window("*/5 * * * *", 5 / 60, "deny", "UTC")],
            "2026-12-05 12:00",
            None,
        ),
        (  # three allow windows and two deny windows over a week
            [
                window("0 22 * * 5", 2, zone="UTC"),
                window("0 9 * * 1-5", 1, zone="Asia/Tokyo"),
                window("0 3 * * 6", 3, zone="UTC"),
                window("*/15 * * * *", 0.2, "deny", "UTC"),
                window("0 0 * * *", 4, "deny", "Asia/Tokyo"),
            ],
            "2026-12-05 00:30",
            "2026-12-05 03:12",
        ),
    ],
)
def test_frequent_deny_windows_give_the_exact_next_opening(
    windows: list[Window], instant: str, opens: str | None
) -> None:
    expected = None if opens is None else at(opens)
    assert next_opening(windows, at(instant)) == expected


# --- Crons that can never fire --------------------------------------------------------------

DAYS_IN = {2: 29, 4: 30, 6: 30, 9: 30, 11: 30}
IMPOSSIBLE = st.one_of(
    st.sampled_from(sorted(DAYS_IN)).flatmap(
        lambda month: st.integers(DAYS_IN[month] + 1, 31).map(lambda day: (day, str(month)))
    ),
    st.just((31, "4,6,9,11")),
    st.just((30, "2")),
).flatmap(
    lambda day_month: st.builds(
        lambda minute, hour, days: f"{minute} {hour} {days} {day_month[1]} *",
        st.integers(0, 59),
        st.integers(0, 23),
        st.sampled_from([str(day_month[0]), f"{day_month[0]}-31" if day_month[0] < 31 else "31"]),
    )
)
"""Days that the months named never have: 30 or 31 February, 31 April, June, September, November."""


@settings(max_examples=40, deadline=None)
@given(cron=IMPOSSIBLE)
def test_a_cron_that_never_fires_is_refused(cron: str) -> None:
    with pytest.raises(ValidationError, match="never fires"):
        Window.model_validate({**GOOD, "cron": cron})


@pytest.mark.parametrize(
    "cron", ["0 0 29 2 *", "0 0 31 2 1", "0 0 L 2 *", "0 0 31 * *", "0 0 30 1-3 *"]
)
def test_a_rare_cron_that_does_fire_is_accepted(cron: str) -> None:
    assert Window.model_validate({**GOOD, "cron": cron}).cron == cron


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cron=IMPOSSIBLE)
async def test_a_cron_that_never_fires_in_the_inventory_is_one_line_naming_it(
    tmp_path: Path, cron: str
) -> None:
    marquee = {"name": "m1", "host": "127.0.0.1", "user": "u", "identity_file": "id",
               "known_hosts": "kh", "windows": [GOOD, {**GOOD, "cron": cron}]}  # fmt: skip
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"marquees": [marquee]}), encoding="utf-8")
    with pytest.raises(InventoryError) as refused:
        await YamlInventorySource(path).load()
    [problem] = refused.value.problems
    assert "\n" not in problem
    assert problem.startswith(f"{path}:")
    assert "marquees[0].windows[1].cron" in problem
    assert "never fires" in problem
    assert repr(cron) in problem


@settings(max_examples=15, deadline=None)
@given(cron=IMPOSSIBLE)
def test_a_cron_that_never_fires_in_a_postgresql_row_refuses_that_marquee_alone(
    cron: str,
) -> None:
    rows = _pg_rows()
    rows["marquees"][0]["windows"] = json.dumps([{**GOOD, "cron": cron}])
    validated = validate_snapshot(rows, RowMemo())
    assert [m.name for m in validated.inventory.marquees] == ["edge-1"]
    [problem] = validated.problems
    assert "\n" not in problem
    assert problem.startswith("marquees 'edge-0': column windows.0.cron: ")
    assert "never fires" in problem
    assert cron in problem


@settings(max_examples=15, deadline=None)
@given(cron=IMPOSSIBLE)
def test_a_cron_that_never_fires_as_the_fleet_default_is_refused_naming_it(cron: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLAYGUARD_WINDOWS", json.dumps([{**GOOD, "cron": cron}]))
        with pytest.raises(SettingsError) as refused:
            load_settings(None)
    assert "windows" in str(refused.value)
    assert "never fires" in str(refused.value)
    assert cron in str(refused.value)


def _pg_rows() -> dict[str, Any]:
    return {
        "marquees": marquee_rows("edge-0", "edge-1"),
        "registries": [], "playspecs": [], "playgrounds": [], "agent_chats": [],
    }  # fmt: skip


# --- A window croniter cannot answer for never raises -----------------------------------------

UNANSWERABLE = [
    Window.model_construct(kind="allow", cron="0 0 31 2 *", duration=timedelta(hours=1)),
    Window.model_construct(kind="deny", cron="0 0 30 2 *", duration=timedelta(hours=1)),
    Window.model_construct(
        kind="allow", cron="0 0 31 4,6,9,11 *", duration=timedelta(hours=1), timezone=BERLIN
    ),
]


@pytest.mark.parametrize("broken", UNANSWERABLE, ids=lambda w: f"{w.kind} {w.cron}")
@pytest.mark.parametrize("others", [[], [window("0 * * * *", 0.5, zone="UTC")]])
def test_a_window_croniter_cannot_answer_for_closes_the_set_and_says_why(
    broken: Window, others: list[Window]
) -> None:
    windows = [*others, broken]
    found = verdict(windows, at("2026-12-05 12:00"))
    assert (found.allowed, found.opening) == (False, None)
    assert found.error is not None
    assert broken.cron in found.error
    assert not allows(windows, at("2026-12-05 12:00:30"))
    assert next_opening(windows, at("2026-12-05 12:00:30")) is None


@pytest.mark.parametrize("broken", UNANSWERABLE, ids=lambda w: f"{w.kind} {w.cron}")
def test_a_cycle_with_a_window_croniter_cannot_answer_for_runs_as_detect(broken: Window) -> None:
    marquee = Marquee(name="m1", host="127.0.0.1", user="u", identity_file=Path("id"),
                      known_hosts=Path("kh"))  # fmt: skip
    services = SimpleNamespace(
        settings=Settings.model_validate({"inventory": "inventory.yaml"}).model_copy(
            update={"windows": (broken,)}
        ),
        clock=lambda: at("2026-12-05 12:00").timestamp(),
    )
    cycle = Cycle(cast(CycleServices, services), marquee, Inventory(marquees=[marquee]))
    with capture_logs() as logs:
        assert cycle._outside_windows() is True
    [error] = [line for line in logs if line["event"] == "cycle.windows_unanswered"]
    assert broken.cron in error["error"]


@pytest.mark.parametrize("broken", UNANSWERABLE, ids=lambda w: f"{w.kind} {w.cron}")
async def test_the_marquee_page_of_a_window_croniter_cannot_answer_for_is_told(
    monkeypatch: pytest.MonkeyPatch, broken: Window
) -> None:
    told: dict[str, Any] = {}

    async def read_story(records: object, name: str, **steering: Any) -> dict[str, Any]:
        told.update(steering, name=name)
        return told

    monkeypatch.setattr(story, "read_story", read_story)
    marquee = Marquee(name="m1", host="127.0.0.1", user="u", identity_file=Path("id"),
                      known_hosts=Path("kh")).model_copy(update={"windows": [broken]})  # fmt: skip
    records: Any = None
    await story.steered_story(records, marquee, (), limit=5, now=at("2026-12-05 12:00"))
    assert (told["name"], told["windows"], told["next_opening"]) == ("m1", 1, None)
