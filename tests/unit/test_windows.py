"""Maintenance windows with a fixed clock: allow and deny, the daylight-saving edges of
Europe/Berlin (2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00), the next opening, and
windows refused with one line naming the value, in the inventory and in the settings."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from playguard_async.desired_state.inventory import InventoryError, YamlInventorySource
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
