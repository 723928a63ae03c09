"""What the operator commands print for people: rich tables and lines, durations, and data from
outside (names, records, host output) cleaned for the terminal.

Kept apart from ``cli`` so that ``playguard --version`` and ``--help`` import none of it: rich,
the engine and the lock load only when a command prints their results.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from playguard_async import operate
from playguard_async.engine import CycleResult, Outcome
from playguard_async.lock import LockState
from playguard_async.settings import Settings
from playguard_async.textclean import clean

PIPE_WIDTH = 500


class DataConsole(Console):
    """A console that prints data as data: no rich markup (``[/x]`` in a name would end a style
    that was never opened and crash), no emoji codes, and control characters (a terminal escape
    in a host's output, a record in Redis) shown escaped rather than sent to the terminal."""

    def __init__(self, **options: Any) -> None:
        super().__init__(highlight=False, markup=False, emoji=False, **options)

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(clean(text), **options)


def console() -> Console:
    """Output fitted to a terminal's width; in a pipe or a file, whole lines that grep can find."""
    fitted = DataConsole()
    return fitted if fitted.is_terminal else DataConsole(width=PIPE_WIDTH)


def text(*parts: str | tuple[str, str]) -> Text:
    """Styled text from data: each part (a string, or a string and its style) cleaned."""
    return Text.assemble(
        *(clean(part) if isinstance(part, str) else (clean(part[0]), part[1]) for part in parts)
    )


def phase_line(result: CycleResult, phase: str) -> Text:
    duration = span(result.durations.get(phase, 0.0))
    if result.outcome is not Outcome.OK and result.phase == phase:
        reason = f"  {result.reason}" if result.reason else ""
        failed = (f"{result.outcome.value:<12}", "bold red")
        return text(f"  {phase:<24}", failed, f"{duration:>9}{reason}")
    count = actions(len(result.actions.get(phase, [])))
    return text(f"  {phase:<24}{count:<12}{duration:>9}")


def cycle_summary(result: CycleResult, settings: Settings) -> Text:
    count = actions(sum(len(taken) for taken in result.actions.values()))
    where = f" in {result.phase}" if result.phase else ""
    reason = f": {result.reason}" if result.reason else ""
    verb = "would be taken" if settings.dry_run else "taken"
    fence = "" if result.fence is None else f", fence {result.fence}"
    return text(
        f"{result.marquee}: ",
        (f"{result.outcome.value}{where}{reason}", outcome_style(result.outcome.value)),
        f"; {count} {verb} in {span(result.duration)}{fence}",
    )


def findings_text(last: operate.LastCycle) -> str:
    notes = [f"reason: {last.reason}"] if last.reason else []
    notes += [f"drift {name}: {', '.join(why)}" for name, why in last.drift.items()]
    notes += [f"branch gone: {name} ({branch})" for name, branch in last.branch_gone.items()]
    notes += [f"failed {item}" for item in last.failed]
    return "; ".join(notes) or "none"


def fence_text(fence: int | None) -> str:
    return "?" if fence is None else str(fence)


def holder_text(state: LockState) -> str:
    holder = state.holder
    held = (
        f"replica {holder.replica} (host {holder.host}, pid {holder.pid}, since "
        f"{holder.acquired_at})"
        if holder
        else f"an unknown record {operate.shown_record(state.record)}"
    )
    return f"{held}, fence {fence_text(state.fence)}, {span(state.ttl_left)} left"


def actions(count: int) -> str:
    return f"{count} action" + ("" if count == 1 else "s")


def outcome_style(outcome: str) -> str:
    return {"ok": "green", "locked": "yellow", "interrupted": "yellow"}.get(outcome, "bold red")


def span(seconds: float) -> str:
    """A duration for people: ``0.4 s``, ``14 min 59 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"
