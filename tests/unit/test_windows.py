"""Maintenance windows with a fixed clock: allow and deny, the daylight-saving edges of
Europe/Berlin (2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00), the next opening, and
windows refused with one line naming the value, in the inventory, the PostgreSQL rows and the
settings: crons that can never fire among them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from playguard_async.desired_state.inventory import InventoryError, YamlInventorySource
from playguard_async.desired_state.postgres import RowMemo, validate_snapshot
from playguard_async.desired_state.windows import Window, allows, next_opening
from playguard_async.settings import SettingsError, load_settings

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
    marquee: dict[str, Any] = {
        "name": "edge-0", "host": "127.0.0.1", "port": 22, "user": "u",
        "identity_file": "/k/id", "known_hosts": "/k/kh", "docker_socket": "/run/d.sock",
        "workdir": "/srv/p", "state_dir": None, "launchable": True, "mode": "apply",
        "windows": None,
    }  # fmt: skip
    return {
        "marquees": [marquee, {**marquee, "name": "edge-1"}],
        "registries": [], "playspecs": [], "playgrounds": [], "agent_chats": [],
    }  # fmt: skip
