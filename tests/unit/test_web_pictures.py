"""The web view's pictures without a browser: every picture is well-formed SVG whatever a record
holds (hostile text, outcomes not in the enum, NaN, negative and huge numbers), says in words
what it draws, and the fleet rows' strips are read once per Marquee and last cycle."""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from typing import Any
from xml.etree import ElementTree

import pytest
from markupsafe import Markup
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from playguard_async.coordination.marquee_reads import LastCycle
from playguard_async.engine.results import Outcome
from playguard_async.web import pictures as web_pictures
from playguard_async.web.pictures import (
    CYCLES_DRAWN,
    DURATION_TOP,
    HEALTH_WIDTH,
    LOOKS,
    ODD,
    SLICE_MIN,
    actions_chart,
    badges_html,
    cycle_strip,
    duration_chart,
    finite_seconds,
    health_bar,
    health_slices,
    look_of,
    progress_words,
    rollout_progress,
    row_badges,
    seconds_text,
    small_strip,
)
from playguard_async.web.recent_cycles import RecentCycles

SVG = "{http://www.w3.org/2000/svg}"

HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "</svg><svg onload=alert(3)>",
    "]]><!-- & \u202e",
)

CLASSES = {
    "strip", "chart", "health", "progress", "wave", "wave-done", "bar-duration",
    "bar-actions", "bar-unknown", "dry", "frame",
    *(f"pic-{look.kind}" for look in web_pictures.LEGEND),
}  # fmt: skip
"""Every class a picture may give: none comes from a value."""


def cycle(
    outcome: str = "ok",
    *,
    duration: float | None = 1.0,
    actions: int = 0,
    name: str = "c1",
    dry_run: bool = False,
) -> LastCycle:
    return LastCycle(
        cycle=name, outcome=outcome, phase=None, reason=None, fence=None, host_fence=None,
        finished_at=1e9, duration=duration, actions=actions, drift={}, branch_gone={},
        failed=[], dry_run=dry_run,
    )  # fmt: skip


def parsed(picture: Markup) -> ElementTree.Element:
    """``picture`` as XML (it must be well-formed), after checking it holds only the elements
    and classes a picture draws."""
    root = ElementTree.fromstring(str(picture))
    assert root.tag == f"{SVG}svg"
    assert root.get("role") == "img"
    assert root.get("aria-label")
    for element in root.iter():
        assert element.tag in {f"{SVG}{tag}" for tag in ("svg", "title", "rect", "path")}, (
            element.tag
        )
        assert set(element.attrib) <= {
            "class", "viewBox", "width", "height", "role", "aria-label", "x", "y", "d",
        }, element.attrib  # fmt: skip
        assert re.fullmatch(r"(M[0-9.]+ 0h[0-9.]+v[0-9.]+h-[0-9.]+z)*", element.get("d", ""))
        assert set((element.get("class") or "").split()) <= CLASSES, element.get("class")
        for name in ("x", "y", "width", "height"):
            if element.get(name) is not None:
                assert math.isfinite(float(element.get(name) or "")), element.attrib
    return root


def marks(root: ElementTree.Element) -> list[tuple[str, float]]:
    """The marks a picture draws, as (class, x), left to right: its rectangles and each run of
    a path (``M x 0h...z``)."""
    found = [
        (rect.get("class") or "", float(rect.get("x") or 0)) for rect in root.iter(f"{SVG}rect")
    ]
    for path in root.iter(f"{SVG}path"):
        found += [
            (path.get("class") or "", float(x))
            for x in re.findall(r"M([0-9.]+) 0h", path.get("d") or "")
        ]
    return sorted(found, key=lambda mark: (mark[0] != "frame", mark[1]))


def words(root: ElementTree.Element) -> str:
    return " ".join(
        [root.get("aria-label") or "", *(t.text or "" for t in root.iter(f"{SVG}title"))]
    )


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize(
    "draw", [cycle_strip, small_strip, duration_chart, actions_chart], ids=lambda f: f.__name__
)
def test_a_hostile_outcome_or_cycle_id_is_text_in_well_formed_svg(draw: Any, value: str) -> None:
    picture = draw([cycle(value, name=value), cycle("ok", name=value)])
    assert value not in str(picture)
    root = parsed(picture)
    assert value in words(root), "told in words, as text"


@pytest.mark.parametrize(
    ("duration", "drawn", "told"),
    [
        (None, None, "unknown time"),
        (math.nan, None, "unknown time"),
        (-5.0, None, "unknown time"),
        (-math.inf, None, "unknown time"),
        (0.0, 0.0, "0.0 s"),
        (2.25, 2.25, "2.2 s"),
        (600.0, 600.0, "10 min"),
        (1e300, DURATION_TOP, "a day or more"),
        (math.inf, DURATION_TOP, "a day or more"),
    ],
)
def test_durations_are_clamped_to_the_picture(
    duration: float | None, drawn: float | None, told: str
) -> None:
    assert finite_seconds(duration) == drawn
    assert seconds_text(duration) == told
    root = parsed(duration_chart([cycle(duration=duration), cycle(duration=3.0)]))
    assert told in words(root)
    heights = [float(rect.get("height") or "") for rect in root.iter(f"{SVG}rect")]
    assert all(0 <= height <= web_pictures.CHART_HEIGHT for height in heights)


@pytest.mark.parametrize("actions", [-3, 0, 7, 10**12])
def test_action_counts_of_any_size_stay_inside_the_chart(actions: int) -> None:
    root = parsed(actions_chart([cycle(actions=actions), cycle(actions=1)]))
    heights = [float(rect.get("height") or "") for rect in root.iter(f"{SVG}rect")]
    assert all(0 <= height <= web_pictures.CHART_HEIGHT for height in heights)


def test_every_outcome_the_engine_writes_has_its_own_look_and_others_look_odd() -> None:
    for outcome in Outcome:
        assert outcome.value in LOOKS, outcome
        assert look_of(outcome.value) is not ODD
    assert look_of("never").kind == "none"
    for value in ("", "OK", "failed", *HOSTILE):
        assert look_of(value) is ODD
    glyphs = [look.glyph for look in web_pictures.LEGEND]
    assert len(set(glyphs)) == len(glyphs), "each kind reads without colour"


def test_a_strip_draws_the_last_fifty_cycles_oldest_left_a_dry_run_hollow() -> None:
    newest_first = [cycle("phase_failed", name="newest")] + [
        cycle("ok", name=f"c{index}", dry_run=index == 1) for index in range(1, 80)
    ]
    root = parsed(cycle_strip(newest_first))
    marks = [rect for rect in root.iter(f"{SVG}rect") if rect.get("class") != "frame"]
    assert len(marks) == CYCLES_DRAWN
    assert marks[-1].get("class") == "pic-bad"
    assert "newest" in (marks[-1].findtext(f"{SVG}title") or "")
    assert marks[-2].get("class") == "pic-good dry"
    assert "49 ok, 1 phase_failed" in (root.get("aria-label") or "")


@pytest.mark.parametrize("draw", [cycle_strip, small_strip, duration_chart, actions_chart])
def test_few_cycles_are_drawn_on_the_right_of_a_frame_fifty_cycles_wide(draw: Any) -> None:
    root = parsed(draw([cycle("ok")] * 3))
    frame = next(root.iter(f"{SVG}rect"))
    assert frame.get("class") == "frame"
    assert float(frame.get("width") or "") == float((root.get("viewBox") or "").split()[2])
    cell = float(frame.get("width") or "") / CYCLES_DRAWN
    assert marks(root)[1][1] == pytest.approx((CYCLES_DRAWN - 3) * cell)


def test_a_fleet_row_strip_draws_a_run_of_like_cycles_as_one_mark() -> None:
    newest_first = [cycle("ok")] * 30 + [cycle("unreachable")] * 5 + [cycle("ok")] * 40
    root = parsed(small_strip(newest_first))
    assert [css for css, _ in marks(root)] == ["frame", "pic-good", "pic-bad", "pic-good"]
    assert len(list(root.iter(f"{SVG}path"))) == 2, "one path a look"
    assert "45 ok, 5 unreachable" in (root.get("aria-label") or "")
    assert parsed(small_strip([])).get("aria-label") == "Last 0 cycles, oldest first: none"


@pytest.mark.parametrize(
    ("counts", "told"),
    [
        ({"ok": 9_999, "phase_failed": 1}, ["ok: 9999 of 10000", "phase_failed: 1 of 10000"]),
        ({"ok": 3, "never": 0, "weird": -4}, ["ok: 3 of 3 (100.0%)"]),
        ({"<b>x</b>": 2, "paused": 2}, ["paused: 2 of 4", "<b>x</b>: 2 of 4"]),
    ],
)
def test_the_health_bar_gives_every_outcome_a_visible_slice_and_its_count_in_words(
    counts: dict[str, int], told: list[str]
) -> None:
    root = parsed(health_bar(counts))
    slices = list(root.iter(f"{SVG}rect"))
    assert len(slices) == len(told)
    widths = [float(rect.get("width") or "") for rect in slices]
    assert all(width >= SLICE_MIN - 0.05 for width in widths)
    assert sum(widths) == pytest.approx(HEALTH_WIDTH, abs=0.5)
    for text in told:
        assert text in words(root)


def test_many_outcomes_playguard_does_not_write_are_one_slice_of_the_health_bar() -> None:
    counts = {f"garbage-{index}": 1 for index in range(300)} | {"ok": 9_700}
    slices = health_slices(counts)
    assert [(piece.outcome, piece.count) for piece in slices] == [
        ("ok", 9_700), ("300 other outcomes", 300),
    ]  # fmt: skip
    root = parsed(health_bar(counts))
    widths = [float(rect.get("width") or "") for rect in root.iter(f"{SVG}rect")]
    assert sum(widths) == pytest.approx(HEALTH_WIDTH, abs=0.5)


def test_the_health_bar_orders_slices_good_held_bad_none_odd() -> None:
    slices = health_slices({"zz": 1, "never": 1, "error": 1, "locked": 1, "ok": 1})
    assert [piece.outcome for piece in slices] == ["ok", "locked", "error", "never", "zz"]
    assert parsed(health_bar({})).get("aria-label") == "No Marquee in the fleet"


@pytest.mark.parametrize(
    ("waves", "wave", "verified", "done", "filled", "told"),
    [
        ([1, 4, 5], 1, 2, False, [1.0, 0.5, 0.0], "wave 2 of 3, 2 of 4 verified healthy"),
        ([1, 4, 5], 2, 99, False, [1.0, 1.0, 1.0], "wave 3 of 3, 99 of 5 verified healthy"),
        ([2, 2], 7, -3, False, [1.0, 0.0], "wave 2 of 2, -3 of 2 verified healthy"),
        ([2, 0], 0, 1, False, [0.5, 1.0], "wave 1 of 2, 1 of 2 verified healthy"),
        ([3, 3], 1, 0, True, [1.0, 1.0], "wave 2 of 2, 0 of 3 verified healthy"),
        ([], 0, 0, False, [], "no waves"),
    ],
)
def test_rollout_progress_fills_the_waves_before_the_current_and_its_verified_share(
    waves: list[int], wave: int, verified: int, done: bool, filled: list[float], told: str
) -> None:
    root = parsed(rollout_progress(waves, wave, verified, done))
    assert progress_words(waves, wave, verified) == told == root.get("aria-label")
    rects = list(root.iter(f"{SVG}rect"))
    backs = [rect for rect in rects if rect.get("class") == "wave"]
    shares = []
    for back in backs:
        fill = next(
            (r for r in rects if r.get("class") == "wave-done" and r.get("x") == back.get("x")),
            None,
        )
        width = float(back.get("width") or "")
        shares.append(0.0 if fill is None else float(fill.get("width") or "") / width)
    assert shares == pytest.approx(filled, abs=0.01)


@pytest.mark.parametrize(
    ("mode", "paused", "held", "badges"),
    [
        ("apply", False, 0, []),
        ("apply", True, 0, ["‖ paused"]),
        ("detect", False, 2, ["◌ detect", "⚓ 2 held"]),
        ("off", True, 1, ["‖ paused", "○ off", "⚓ 1 held"]),
        ("<i>x</i>", False, 0, ["? <i>x</i>"]),
    ],
)
def test_row_badges_say_paused_detect_off_and_held_in_words(
    mode: str, paused: bool, held: int, badges: list[str]
) -> None:
    shown = row_badges(mode, paused, held)
    assert [text for _, text in shown] == badges
    assert all(re.fullmatch(r"badge-[a-z]+", css) for css, _ in shown)
    html = str(badges_html(mode, paused, held))
    assert html.count('<span class="badge badge-') == len(badges)
    assert "<i>" not in html


class CountedHistories:
    """Histories answered from memory, counted; ``failing`` names answer with ``error``."""

    def __init__(self) -> None:
        self.reads: Counter[str] = Counter()
        self.histories: dict[str, list[dict[str, Any]]] = {}
        self.failing: dict[str, Exception] = {}

    async def history(self, marquee: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        self.reads[marquee] += 1
        await asyncio.sleep(0.01)
        if marquee in self.failing:
            raise self.failing[marquee]
        return self.histories.get(marquee, [])[:limit]


def record(outcome: str, number: int) -> dict[str, Any]:
    return {
        "cycle": f"c{number}", "outcome": outcome, "finished_at": 1e9 + number,
        "duration": 1.0, "actions": {},
    }  # fmt: skip


async def test_a_rows_strip_is_read_once_per_last_cycle_however_many_pages_ask() -> None:
    histories = CountedHistories()
    histories.histories = {"m1": [record("ok", 2), record("error", 1)], "m2": []}
    recent = RecentCycles(histories)  # type: ignore[arg-type]
    rows = [("m1", "c2"), ("m2", "c9")]
    asked = await asyncio.gather(*(recent.strips(rows, read=True) for _ in range(20)))
    assert histories.reads == {"m1": 1, "m2": 1}
    assert all(strips == asked[0] for strips in asked)
    assert "1 error, 1 ok" in str(asked[0]["m1"])
    await recent.strips(rows, read=True)
    assert histories.reads == {"m1": 1, "m2": 1}, "kept while the last cycle is the same"
    histories.histories["m1"].insert(0, record("paused", 3))
    again = await recent.strips([("m1", "c3")], read=True)
    assert histories.reads["m1"] == 2
    assert "1 error, 1 ok, 1 paused" in str(again["m1"])


async def test_a_history_redis_cannot_give_is_no_strip_and_another_type_an_empty_one() -> None:
    histories = CountedHistories()
    histories.failing = {
        "gone": RedisConnectionError("refused"),
        "a-set": ResponseError("WRONGTYPE Operation against a key holding the wrong kind"),
    }
    recent = RecentCycles(histories)  # type: ignore[arg-type]
    strips = await recent.strips([("gone", "c1"), ("a-set", "c1")], read=True)
    assert "gone" not in strips
    assert "oldest first: none" in str(strips["a-set"])
    await recent.strips([("gone", "c1"), ("a-set", "c1")], read=True)
    assert histories.reads == {"gone": 2, "a-set": 1}, "a failed read is tried again"


async def test_while_redis_is_away_the_strips_kept_are_shown_and_nothing_is_read() -> None:
    histories = CountedHistories()
    histories.histories = {"m1": [record("ok", 1)]}
    recent = RecentCycles(histories)  # type: ignore[arg-type]
    kept = await recent.strips([("m1", "c1")], read=True)
    away = await recent.strips([("m1", "c2"), ("m2", "c1")], read=False)
    assert away == kept, "m1's last strip as it was, m2 none"
    assert histories.reads == {"m1": 1}
