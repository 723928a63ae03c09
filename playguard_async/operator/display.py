"""What the operator commands print for people: rich tables and lines, durations, and data from
outside (names, records, host output) cleaned for the terminal.

Kept apart from ``cli`` so that ``playguard --version`` and ``--help`` import none of it: rich,
the engine and the lock load only when a command prints their results.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from playguard_async.coordination import marquee_reads
from playguard_async.coordination.lock_state import LockState
from playguard_async.coordination.pause import Pause
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.kits.textclean import clean
from playguard_async.operator.plan_verdict import (
    PlanVerdict,
    held_playgrounds,
    plan_verdict,
    rollouts_in,
)
from playguard_async.settings import Settings

if TYPE_CHECKING:
    from playguard_async.operator import why

PIPE_WIDTH = 500


class DataConsole(Console):
    """A console that prints data as data: no rich markup (``[/x]`` in a name would end a style
    that was never opened and crash), no emoji codes, and control characters (a terminal escape
    in a host's output, a record in Redis) shown escaped rather than sent to the terminal."""

    def __init__(self, **options: Any) -> None:
        super().__init__(highlight=False, markup=False, emoji=False, **options)

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(clean(text), **options)


class PipeConsole(DataConsole):
    """A ``DataConsole`` for a pipe or a file: each line as wide as what it says, without the
    spaces a table pads its last column with up to the widest row (a piped ``check`` was 220
    columns a row)."""

    def print(self, *objects: Any, **options: Any) -> None:
        with self.capture() as captured:
            super().print(*objects, **options)
        lines = captured.get().splitlines()
        self.file.write("".join(line.rstrip() + "\n" for line in lines))
        self.file.flush()


def console() -> Console:
    """Output fitted to a terminal's width; in a pipe or a file, whole lines that grep can find,
    not padded."""
    fitted = DataConsole()
    return fitted if fitted.is_terminal else PipeConsole(width=PIPE_WIDTH)


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


def findings_notes(last: marquee_reads.LastCycle) -> list[str]:
    """What a recorded cycle asks an operator to look at, one note each (none: in sync)."""
    notes = [f"reason: {last.reason}"] if last.reason else []
    notes += last.change_lines()
    notes += [f"branch gone: {name} ({branch})" for name, branch in last.branch_gone.items()]
    notes += [f"still failing: {item}" for item in last.failed]
    notes += [f"{name}: {'; '.join(why)}" for name, why in last.unhealthy.items()]
    return notes


def findings_text(last: marquee_reads.LastCycle) -> str:
    return "; ".join(findings_notes(last)) or "none"


def last_text(last: marquee_reads.LastCycle) -> Text:
    """A recorded cycle's outcome and where it ended; a dry run says so, in yellow when it found
    drift (it changed nothing, so that drift is still there)."""
    where = f" in {last.phase}" if last.phase else ""
    style = outcome_style(last.outcome)
    if last.dry_run:
        where += " (dry run)"
        style = "yellow" if last.drift and last.outcome == "ok" else style
    return text((last.outcome + where, style))


def steering_text(marquee: marquee_reads.MarqueeStatus) -> str:
    """What steers a Marquee besides its desired state, for the name column: ``not
    launchable``, its mode unless ``apply``, ``paused``; empty when none of them."""
    notes = [] if marquee.launchable else ["not launchable"]
    notes += [] if marquee.mode == "apply" else [f"mode {marquee.mode}"]
    notes += [] if marquee.pause is None else ["paused"]
    return f" ({', '.join(notes)})" if notes else ""


def pause_text(pause: Pause) -> str:
    """A pause in one line: what, by whom, why, until when (wall clock, UTC)."""
    if not pause.known:
        return pause.describe()
    until = datetime.fromtimestamp(pause.until, UTC).isoformat(timespec="seconds")
    return f"{pause.describe()} (until {until})"


def unreadable_lines(unreadable: tuple[str, ...]) -> list[str]:
    """Each key of another type than playguard writes there, as a line of its own."""
    return [f"unreadable: {line}" for line in unreadable]


def status_table(statuses: list[marquee_reads.MarqueeStatus], now: float) -> Table:
    columns = ("MARQUEE", "HOLDER", "FENCE", "TTL LEFT", "LAST", "WHEN", "DURATION", "ACTIONS")
    table = Table(*columns, "FINDINGS", box=None, header_style="bold")
    for marquee in statuses:
        lock, last = marquee.lock, marquee.last
        name = marquee.name + steering_text(marquee)
        notes = [] if marquee.pause is None else [pause_text(marquee.pause)]
        notes += unreadable_lines(marquee.unreadable)
        holding: list[str | Text] = ["-", "-", "-"]
        if lock is not None:
            holder = lock.holder
            holding = [
                f"{holder.replica} ({holder.host}, pid {holder.pid})"
                if holder
                else marquee_reads.unknown_holder(lock),
                marquee_reads.fence_shown(lock.fence, last),
                span(lock.ttl_left),
            ]
        elif last is not None and last.fence is not None:
            holding[1] = marquee_reads.fence_shown(last.fence, last)
        history: list[str | Text] = [text("never"), "-", "-", "-", "-"]
        if last is not None:
            history = [
                last_text(last),
                "-" if last.finished_at is None else f"{span(now - last.finished_at)} ago",
                "-" if last.duration is None else span(last.duration),
                str(last.actions),
                "; ".join(notes + findings_notes(last) + held_notes(marquee.revisions)) or "none",
            ]
        elif notes:
            history[-1] = "; ".join(notes)
        table.add_row(name, *holding, *history)
    return table


def held_notes(revisions: dict[str, marquee_reads.PlaygroundRevisions]) -> list[str]:
    """The held Playgrounds of a Marquee and who holds each, for its status row: ``pinned at
    <commit> by <who>`` or ``held by rollout <scope>, wave k of n``."""
    return [f"{name} {told.hold}" for name, told in sorted(revisions.items()) if told.hold]


def history_table(cycles: list[marquee_reads.LastCycle], now: float) -> Table:
    table = Table("WHEN", "OUTCOME", "REPLICA", "FENCE", "DURATION", "WAITED", "ACTIONS",
                  "FINDINGS", box=None, header_style="bold")  # fmt: skip
    for cycle in cycles:
        table.add_row(
            "-" if cycle.finished_at is None else f"{span(now - cycle.finished_at)} ago",
            last_text(cycle),
            clean(cycle.replica or "?"),
            fence_text(cycle.fence),
            "-" if cycle.duration is None else span(cycle.duration),
            "-" if cycle.waited is None else span(cycle.waited),
            str(cycle.actions),
            clean(findings_text(cycle)),
        )
    return table


def print_story(told: marquee_reads.MarqueeStory, now: float) -> None:
    """``describe``'s report of one Marquee."""
    out = console()
    lock = told.lock
    out.print(text(("Marquee ", "bold"), told.name))
    out.print(text(f"  mode: {told.mode}"))
    out.print(text(f"  windows: {told.windows_text(datetime.fromtimestamp(now, UTC))}"))
    out.print(text("  paused: ", "no" if told.pause is None else pause_text(told.pause)))
    out.print(text("  lock: ", "not held" if lock is None else holder_text(lock)))
    for line in unreadable_lines(told.unreadable):
        out.print(text(f"  {line}"))
    out.print(text(f"  {told.fence}"))
    if told.last is None:
        out.print(text("  last cycle: never"))
        return
    last = told.last
    ended = "-" if last.finished_at is None else f"{span(now - last.finished_at)} ago"
    out.print(text("  last cycle: ", last_text(last).plain, f", {ended}, by {last.replica or '?'}"))
    if last.duration is not None:
        # Its own work, from the lock on; the start offset and the wait for a slot come apart.
        waited = "" if last.waited is None else f", after waiting {span(last.waited)} to start"
        out.print(text(f"  took {span(last.duration)}{waited}"))
    if last.trace is not None:
        out.print(text(f"  trace: {last.trace}"))
    for step in told.steps:
        seconds = "?" if step.seconds is None else span(step.seconds)
        out.print(text(f"    {step.phase}: {seconds}, {actions(len(step.actions))}"))
        for action in step.actions:
            out.print(text(f"      did {action}"))
        for kind, subject, detail in step.notices:
            out.print(text(f"      {kind} {subject}: {detail}"))
        if step.more:
            out.print(text(f"      ... {step.more} more"))
    last_good = [f"{name}: {state}" for name, state in sorted(told.last_good.items())]
    revisions = [f"{name}: {shown.short()}" for name, shown in sorted(told.revisions.items())]
    for heading, items in (
        ("still wrong", told.still_wrong),
        ("fixed", told.fixed),
        ("last good", last_good),
        ("revisions", revisions),
    ):
        out.print(text(f"  {heading}: ", "none" if not items else ""))
        for item in items:
            out.print(text(f"    {item}"))
    out.print(text(f"  recent cycles ({len(told.history)}):"))
    out.print(history_table(told.history, now))


def plan_line(result: CycleResult) -> str:
    """One Marquee's plan in a line (``plan --all``): in sync, what would change, or the error."""
    verdict = plan_verdict(result)
    if verdict is PlanVerdict.ERROR:
        return f"{result.marquee}: error: {result.outcome.value}: {result.reason or '-'}"
    held = held_playgrounds(result)
    also = f"; {len(held)} held" if held else ""
    if verdict is PlanVerdict.IN_SYNC:
        return f"{result.marquee}: in sync{also}"
    counts = ", ".join(f"{phase} {len(taken)}" for phase, taken in result.actions.items() if taken)
    total = sum(len(taken) for taken in result.actions.values())
    return f"{result.marquee}: {total} changes pending ({counts}){also}"


def plan_lines(result: CycleResult, holder: LockState | None) -> list[tuple[str, bool]]:
    """One Marquee's plan as lines, each with whether it is a phase's heading: each phase with
    what it would do, the Playgrounds held, the rollouts, then the verdict (the CLI prints them,
    the web view shows them)."""
    if result.outcome is Outcome.LOCKED:
        held = holder_text(holder) if holder else "another holder (gone since)"
        return [(f"{result.marquee}: error: locked by {held}; no plan made", False)]
    lines: list[tuple[str, bool]] = []
    for phase, taken in result.actions.items():
        if taken:
            lines.append((phase, True))
            lines += [(f"  {action}", False) for action in taken]
    lines += [
        (f"held: {name}: {why}", False) for name, why in sorted(held_playgrounds(result).items())
    ]
    for scope, rollout in sorted(rollouts_in(result).items()):
        here = "held here" if rollout.get("held") else "admitted here"
        line = (
            f"rollout {scope}: {rollout.get('status')}, wave {rollout.get('wave')} of "
            f"{rollout.get('waves')}, release {rollout.get('release')} ({here})"
        )
        lines.append((line, False))
    lines.append((plan_line(result), False))
    return lines


def print_plan(result: CycleResult, holder: LockState | None) -> None:
    """One Marquee's plan (``plan_lines``), phases in bold."""
    out = console()
    for line, heading in plan_lines(result, holder):
        out.print(text((line, "bold")) if heading else text(line), soft_wrap=True)


def fence_text(fence: int | None) -> str:
    return "?" if fence is None else str(fence)


def holder_text(state: LockState) -> str:
    holder = state.holder
    held = (
        f"replica {holder.replica} (host {holder.host}, pid {holder.pid}, since "
        f"{holder.acquired_at})"
        if holder
        else f"an {marquee_reads.unknown_holder(state)}"
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


def timeline_lines(timeline: why.Timeline) -> list[str]:
    """``playguard why`` for a person: one event a line, oldest first; under a cycle, why it
    acted, what it meant to do that its host did not journal, and each write its host accepted."""
    about = timeline.marquee + (f" playground {timeline.playground}" if timeline.playground else "")
    lines = [f"{about}: since {_stamp(timeline.since)} (times UTC)"]
    if not timeline.playground_wanted:
        lines.append(f"  playground {timeline.playground} is not in the desired state now")
    if timeline.host_unread is not None:
        lines.append(f"  host journal not read: {timeline.host_unread}")
    if timeline.changes_unread is not None:
        lines.append(f"  change log not read: {timeline.changes_unread}")
    lines.extend(_journal_lines(timeline))
    if not timeline.events:
        lines.append("  nothing happened (cycles in sync are not shown)")
    for event in timeline.events:
        lines.append(_event_head(event))
        if event.version is not None:
            lines.append(f"    read     {event.version}")
        lines.extend(f"    includes {included}" for included in event.includes)
        if event.kind == "cycle" and event.text != f"cycle {event.cycle_id} {event.outcome}":
            lines.append(f"    outcome  {event.text}")
        lines.extend(f"    cause    {cause}" for cause in event.causes)
        journalled = {write.action for write in event.writes}
        lines.extend(
            f"    meant    {action}" for action in event.actions if action not in journalled
        )
        if event.kind == "cycle":
            lines.extend(
                f"    host     {_stamp(write.at)}  fence {fence_text(write.fence)}  {write.action}"
                for write in event.writes
            )
    return [clean(line) for line in lines]


def _event_head(event: why.Event) -> str:
    """The first line of an event: when, what, by whom, and the cycle that read it (an input)."""
    head = f"{_stamp(event.at)}  {event.kind}"
    if event.kind == "cycle":
        fence = f"fence {fence_text(event.fence)}"
        head = f"{head} {event.cycle_id}  {event.outcome}  {event.by}  {fence}"
    elif event.kind == "host write":
        cycle = f"cycle {event.cycle_id}" if event.cycle_id else "no cycle id"
        head = f"{head}  fence {fence_text(event.fence)}  {event.text}  [{event.by}; {cycle}]"
    else:
        head = f"{head}  {event.by}: {event.text}" if event.by else f"{head}  {event.text}"
    if event.included_in is not None:
        return f"{head}  [in cycle {event.included_in}]"
    if event.applied_by is not None:
        return f"{head}  [applied by cycle {event.applied_by}, from the host journal]"
    if event.read_by_or_before is not None:
        return f"{head}  [in cycle {event.read_by_or_before} or one before it, no longer recorded]"
    return head


def _journal_lines(timeline: why.Timeline) -> list[str]:
    """Where the host's journal begins, when that is after ``since``: said as a cut (what it
    held before is gone) or as the start of a host written to since."""
    journal = timeline.journal
    if journal is None:
        return []
    begins = journal.begins
    if begins is None:
        return ["  host journal holds no write and no mark of its start: it was emptied, what "
                "it held is gone"]  # fmt: skip
    if timeline.journal_cut:
        return [f"  host journal begins at {_stamp(begins)}: it was cut, what it held before "
                "is gone"]  # fmt: skip
    if journal.started and journal.started > timeline.since:
        return [f"  host journal begins at {_stamp(begins)}: when this host was first written"]
    return []


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")
