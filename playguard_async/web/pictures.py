"""The web view's pictures: SVG drawn on the server from rows and cycles already read, inline in
the page, so they need no script, fetch nothing and live under the same Content-Security-Policy
(no style attribute: colours and patterns are classes of ``web_view.css``).

Every value drawn is outside input (a record in Redis may hold any outcome, any number), so a
picture never puts a value into markup unescaped and never lets one choose a class or a size:
an outcome picks its look from ``LOOKS`` (anything else looks ``odd``), numbers are clamped to
the picture (NaN, negative and absent read as unknown, huge ones as the top), text is escaped
(``markupsafe``). Each picture says in words what it shows (``role="img"``, ``aria-label``, a
``<title>`` per mark), and each kind of outcome has a pattern and a glyph besides its colour, so
it reads in grey and to a screen reader.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from playguard_async.coordination.marquee_reads import LastCycle

CYCLES_DRAWN = 50
"""Cycles a strip draws at most, the newest on the right (Redis keeps ``history_length``)."""

DURATION_TOP = 86_400.0
"""Seconds a duration bar reaches at most: a longer (or garbled) duration is drawn this long."""


@dataclass(frozen=True)
class Look:
    """How a kind of outcome is drawn: its class (colour and pattern), glyph and word."""

    kind: str
    glyph: str
    word: str


GOOD = Look("good", "✓", "ok")
HELD = Look("held", "‖", "held back (paused, locked, interrupted)")
PINNED = Look("pinned", "⚓", "Playgrounds held (pinned, or by a rollout)")
DETECT = Look("detect", "◌", "detect only, or off")
BAD = Look("bad", "✗", "failed")
NONE = Look("none", "·", "never ran")
ODD = Look("odd", "?", "not an outcome playguard writes")

LOOKS: Mapping[str, Look] = {
    "ok": GOOD,
    "paused": HELD,
    "locked": HELD,
    "interrupted": HELD,
    "held": PINNED,
    "detect": DETECT,
    "off": DETECT,
    "never": NONE,
    **dict.fromkeys(
        (
            "phase_failed",
            "unhealthy",
            "unreachable",
            "lock_lost",
            "deadline",
            "error",
            "redis_unavailable",
        ),
        BAD,
    ),
}
"""Outcome (or, in the health bar, a Marquee's standing: ``held``, ``detect``, ``off``) -> its
look; an outcome not here (a record of another program) looks ``ODD``."""

LEGEND: tuple[Look, ...] = (GOOD, HELD, BAD, NONE, ODD)
"""The looks of a cycle's outcome, as the strips and charts draw them."""

STANDING_LEGEND: tuple[Look, ...] = (GOOD, HELD, PINNED, DETECT, BAD, NONE, ODD)
"""The looks of a Marquee's standing, as the fleet's health bar draws them, in its order."""


def look_of(outcome: str) -> Look:
    return LOOKS.get(outcome, ODD)


def finite_seconds(value: float | None) -> float | None:
    """``value`` as a duration to draw: None when absent, NaN or negative; at most
    ``DURATION_TOP``."""
    if value is None or math.isnan(value) or value < 0:
        return None
    return min(value, DURATION_TOP)


def seconds_text(value: float | None) -> str:
    shown = finite_seconds(value)
    if shown is None:
        return "unknown time"
    if shown >= DURATION_TOP:
        return "a day or more"
    return f"{shown:.1f} s" if shown < 120 else f"{shown / 60:.0f} min"


def _svg(width: int, height: int, label: str, body: Iterable[str], css: str) -> Markup:
    """An inline SVG of ``width`` x ``height`` user units, labelled ``label`` (escaped);
    ``body`` is markup built here from escaped text and numbers only."""
    return Markup(
        f'<svg class="{css}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(label)}</title>{''.join(body)}</svg>"
    )


def _mark(css: str, title: str, box: tuple[float, float, float, float]) -> str:
    """A rectangle of class ``css`` (one of this module's) at ``box`` (x, y, width, height)
    that says ``title`` (escaped)."""
    x, y, width, height = box
    return (
        f'<rect class="{css}" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}">'
        f"<title>{escape(title)}</title></rect>"
    )


# --- The fleet ------------------------------------------------------------------------------

HEALTH_WIDTH, HEALTH_HEIGHT = 1000, 22
SLICE_MIN = 4.0
"""Units a non-empty slice of the health bar takes at least: one failure in 10,000 is seen."""


@dataclass(frozen=True)
class Slice:
    outcome: str
    look: Look
    count: int
    share: float
    """Of the whole fleet, 0-1."""


def health_slices(counts: Mapping[str, int]) -> list[Slice]:
    """``counts`` (standing -> Marquees, over the whole fleet, as ``FleetRows`` keeps them once
    per version) in the order of ``STANDING_LEGEND``, then by name; a count below 1 is left
    out, and outcomes playguard does not write are one slice when there are several."""
    kept = {outcome: count for outcome, count in counts.items() if count > 0}
    odd = [outcome for outcome in kept if look_of(outcome) is ODD]
    if len(odd) > 1:  # any number of garbled records: one slice, so the bar's slices are few
        kept[f"{len(odd)} other outcomes"] = sum(kept.pop(outcome) for outcome in odd)
    total = sum(kept.values())
    order = {look.kind: index for index, look in enumerate(STANDING_LEGEND)}
    ranked = sorted(kept, key=lambda outcome: (order[look_of(outcome).kind], outcome))
    return [
        Slice(outcome, look_of(outcome), kept[outcome], kept[outcome] / total) for outcome in ranked
    ]


def health_bar(counts: Mapping[str, int]) -> Markup:
    """The fleet by standing (``fleet_table.standing_of``: a failed last outcome, else paused,
    held, detect or off, else the last outcome), one slice per standing as wide as its share
    (every non-empty slice at least ``SLICE_MIN`` wide)."""
    slices = health_slices(counts)
    total = sum(piece.count for piece in slices)
    if not slices:
        return _svg(HEALTH_WIDTH, HEALTH_HEIGHT, "No Marquee in the fleet", (), "health")
    room = HEALTH_WIDTH - SLICE_MIN * len(slices)
    x, marks, words = 0.0, [], []
    for piece in slices:
        width = SLICE_MIN + room * piece.share
        said = f"{piece.outcome}: {piece.count} of {total} ({piece.share:.1%})"
        marks.append(_mark(f"pic-{piece.look.kind}", said, (x, 0, width, HEALTH_HEIGHT)))
        words.append(f"{piece.look.glyph} {said}")
        x += width
    return _svg(HEALTH_WIDTH, HEALTH_HEIGHT, "Fleet health: " + "; ".join(words), marks, "health")


def row_badges(mode: str, paused: bool, held: int) -> list[tuple[str, str]]:
    """A row's badges as (class, text): paused, detect or off (``apply`` is the usual and has
    none), and how many Playgrounds are held (pinned or held back by a rollout)."""
    badges = []
    if paused:
        badges.append(("badge-paused", "‖ paused"))
    if mode == "detect":
        badges.append(("badge-detect", "◌ detect"))
    elif mode == "off":
        badges.append(("badge-off", "○ off"))
    elif mode != "apply":
        badges.append(("badge-odd", f"? {mode}"))
    if held:
        badges.append(("badge-held", f"⚓ {held} held"))
    return badges


@functools.lru_cache(maxsize=256)
def badges_html(mode: str, paused: bool, held: int) -> Markup:
    """``row_badges`` as markup, drawn once per distinct row state (a page of 200 rows has a
    handful), not once per row."""
    return Markup("").join(
        Markup('<span class="badge {}">{}</span>').format(css, text)
        for css, text in row_badges(mode, paused, held)
    )


PROGRESS_WIDTH, PROGRESS_HEIGHT = 240, 16


def progress_words(waves: Sequence[int], wave: int, verified: int) -> str:
    """A rollout's progress in words: its current wave of all, and how many of it are verified
    healthy (``waves``: each wave's size)."""
    if not waves:
        return "no waves"
    current = min(max(wave, 0), len(waves) - 1)
    return f"wave {current + 1} of {len(waves)}, {verified} of {waves[current]} verified healthy"


def rollout_progress(waves: Sequence[int], wave: int, verified: int, done: bool) -> Markup:
    """A rollout's waves side by side, each as wide as its share of the cohort (``waves``: each
    wave's size); the waves before ``wave`` full, ``wave`` filled by ``verified`` of its size."""
    sizes = [max(0, size) for size in waves]
    total = sum(sizes) or 1
    count = len(sizes)
    current = min(max(wave, 0), count - 1) if count else 0
    x, marks = 0.0, []
    for index, size in enumerate(sizes):
        width = max(2.0, (PROGRESS_WIDTH - count) * size / total)
        shown = size if done or index < current else (verified if index == current else 0)
        part = min(1.0, max(0.0, shown / size)) if size else 1.0
        said = f"wave {index + 1}: {max(0, min(shown, size))} of {size}"
        marks.append(_mark("wave", said, (x, 0, width, PROGRESS_HEIGHT)))
        if part:
            marks.append(_mark("wave-done", said, (x, 0, width * part, PROGRESS_HEIGHT)))
        x += width + 1
    label = progress_words(sizes, wave, verified)
    return _svg(PROGRESS_WIDTH, PROGRESS_HEIGHT, label, marks, "progress")


# --- Cycles ---------------------------------------------------------------------------------

CELL = 6
"""Units per cycle in a strip."""


def _cycle_words(cycle: LastCycle) -> str:
    dry = " (dry run)" if cycle.dry_run else ""
    return f"{cycle.cycle}: {cycle.outcome}{dry}, {seconds_text(cycle.duration)}, " + (
        f"{cycle.actions} action" + ("" if cycle.actions == 1 else "s")
    )


def _tally(cycles: Sequence[LastCycle]) -> str:
    counted: dict[str, int] = {}
    for cycle in cycles:
        counted[cycle.outcome] = counted.get(cycle.outcome, 0) + 1
    return ", ".join(f"{count} {outcome}" for outcome, count in counted.items())


def _drawn(newest_first: Sequence[LastCycle]) -> list[LastCycle]:
    """The cycles a strip draws, oldest first (history is kept newest first)."""
    return list(reversed(newest_first[:CYCLES_DRAWN]))


def _frame(cell: float, count: int, height: float) -> tuple[float, str]:
    """Where the first of ``count`` cycles is drawn, and the frame behind them all: every
    cycle picture is ``CYCLES_DRAWN`` cells wide with the newest on the right, so a Marquee
    with few cycles shows how few, and pictures one under another line up."""
    frame = f'<rect class="frame" width="{CYCLES_DRAWN * cell}" height="{height}"/>'
    return (CYCLES_DRAWN - count) * cell, frame


def _cell_class(cycle: LastCycle) -> str:
    return f"pic-{look_of(cycle.outcome).kind}{' dry' if cycle.dry_run else ''}"


def cycle_strip(newest_first: Sequence[LastCycle], *, height: int = 22) -> Markup:
    """The last ``CYCLES_DRAWN`` cycles, oldest left: one cell each, its look by outcome, a dry
    run hollow."""
    cycles = _drawn(newest_first)
    left, frame = _frame(CELL, len(cycles), height)
    marks = [frame] + [
        _mark(_cell_class(cycle), _cycle_words(cycle), (left + index * CELL, 0, CELL - 1, height))
        for index, cycle in enumerate(cycles)
    ]
    label = f"Last {len(cycles)} cycles, oldest first: {_tally(cycles) or 'none'}"
    return _svg(CYCLES_DRAWN * CELL, height, label, marks, "strip")


SMALL_CELL = 3
"""Units per cycle in a fleet row's strip."""


def small_strip(newest_first: Sequence[LastCycle], *, height: int = 12) -> Markup:
    """A fleet row's strip: the same cycles as ``cycle_strip``, a run of cycles that look alike
    drawn as one rectangle, and the rectangles of one look as one path, told in words once (its
    label), as a page draws a hundred of them: the Marquee's page has each cycle's words. A
    path costs about 20 bytes a run where a rectangle of its own cost 65: a row whose cycles
    alternate stays about 1 KB (bench/README.md, "Web view pages")."""
    cycles = _drawn(newest_first)
    left, frame = _frame(SMALL_CELL, len(cycles), height)
    runs: dict[str, list[str]] = {}
    start = 0
    for index in range(1, len(cycles) + 1):
        if index < len(cycles) and _cell_class(cycles[index]) == _cell_class(cycles[start]):
            continue
        width = (index - start) * SMALL_CELL - 0.5
        runs.setdefault(_cell_class(cycles[start]), []).append(
            f"M{left + start * SMALL_CELL} 0h{width:g}v{height}h-{width:g}z"
        )
        start = index
    marks = [frame] + [
        f'<path class="{css}" d="{"".join(shapes)}"/>' for css, shapes in runs.items()
    ]
    label = f"Last {len(cycles)} cycles, oldest first: {_tally(cycles) or 'none'}"
    return _svg(CYCLES_DRAWN * SMALL_CELL, height, label, marks, "strip")


CHART_HEIGHT = 60


def _chart(
    cycles: Sequence[LastCycle], values: Sequence[float | None], label: str, css: str
) -> Markup:
    """``values`` (one per cycle, None: unknown) as bars scaled to the largest, on the frame."""
    top = max((value for value in values if value is not None), default=0.0)
    left, frame = _frame(CELL, len(cycles), CHART_HEIGHT)
    marks = [frame]
    for index, (cycle, value) in enumerate(zip(cycles, values, strict=True)):
        x, said = left + index * CELL, _cycle_words(cycle)
        if value is None:
            marks.append(_mark("bar-unknown", said, (x, CHART_HEIGHT - 2, CELL - 1, 2)))
            continue
        tall = 0.0 if top <= 0 else max(1.0, CHART_HEIGHT * min(value, top) / top)
        marks.append(_mark(css, said, (x, CHART_HEIGHT - tall, CELL - 1, tall)))
    return _svg(CYCLES_DRAWN * CELL, CHART_HEIGHT, label, marks, "chart")


def longest_text(newest_first: Sequence[LastCycle]) -> str:
    """The longest duration a duration chart draws, in words (its top)."""
    drawn = [finite_seconds(cycle.duration) for cycle in newest_first[:CYCLES_DRAWN]]
    return seconds_text(max((value for value in drawn if value is not None), default=0.0))


def actions_text(newest_first: Sequence[LastCycle]) -> str:
    """The most actions an actions chart draws (its top), and how many in all, in words."""
    drawn = [max(0, cycle.actions) for cycle in newest_first[:CYCLES_DRAWN]]
    return f"at most {max(drawn, default=0)}, {sum(drawn)} in all"


def duration_chart(newest_first: Sequence[LastCycle]) -> Markup:
    """Each cycle's duration as a bar, oldest left, scaled to the longest drawn."""
    cycles = _drawn(newest_first)
    label = (
        f"Duration of the last {len(cycles)} cycles, oldest first; "
        f"longest {longest_text(newest_first)}"
    )
    values = [finite_seconds(cycle.duration) for cycle in cycles]
    return _chart(cycles, values, label, "bar-duration")


def actions_chart(newest_first: Sequence[LastCycle]) -> Markup:
    """Each cycle's action count as a bar, oldest left, scaled to the most drawn."""
    cycles = _drawn(newest_first)
    label = f"Actions of the last {len(cycles)} cycles, oldest first; {actions_text(newest_first)}"
    values: list[float | None] = [float(max(0, cycle.actions)) for cycle in cycles]
    return _chart(cycles, values, label, "bar-actions")
