"""The ``playguard`` command: argument parsing and output only; the work is in ``operate``.

Exit statuses: 0 done (a cycle ended ok, every check passed); 1 an error a person can fix, a
failed check, or ``unlock`` that deleted nothing; 2 bad usage; 3 ``cycle`` found the Marquee
locked by another holder; 4 ``cycle`` ran but did not end ok.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from playguard_async import __version__, daemon, operate, story
from playguard_async.db_cli import db
from playguard_async.engine import CycleCancelled, CycleResult, Outcome
from playguard_async.inventory import InventoryError
from playguard_async.lock import LockState, ReleaseResult
from playguard_async.observe import configure_logging
from playguard_async.phase import UnknownPhase
from playguard_async.settings import Settings, SettingsError, load_settings

_F = TypeVar("_F", bound=Callable[..., Any])

EXIT_LOCKED = 3
EXIT_NOT_OK = 4

_PIPE_WIDTH = 500

CONFIG_OPTION = click.option(
    "--config",
    "config",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="PLAYGUARD_CONFIG",
    default=None,
    help="Settings file (TOML). PLAYGUARD_* environment variables override it.",
)
DRY_RUN_OPTION = click.option(
    "--dry-run", is_flag=True, default=None, help="Report what would change; change nothing."
)
JSON_OPTION = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON with stable keys, for scripts."
)


def _limit_option(default: int, help_text: str) -> Callable[[_F], _F]:
    """``--limit N`` of the commands that read a Marquee's recorded cycles."""
    return click.option(
        "--limit", type=click.IntRange(1, 1000), default=default, show_default=True, help=help_text
    )


_ONE_LINE_ERRORS = (
    SettingsError,
    InventoryError,
    UnknownPhase,
    operate.OperateError,
    CycleCancelled,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="playguard")
@click.option(
    "--debug", is_flag=True, help="Show tracebacks instead of one-line errors, and the log."
)
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Keep a fleet of Docker hosts true to their desired state, one leased reconciler per host."""
    ctx.obj = {"debug": debug}
    # The operator commands print for a person; the engine's own log would only repeat it.
    # `run` and `lab` set the log up again from their settings.
    configure_logging("console", "debug" if debug else "critical")


@contextlib.contextmanager
def _readable_errors(ctx: click.Context) -> Iterator[None]:
    """Errors a person can fix (settings, inventory, Redis...) as one line, unless ``--debug``."""
    try:
        yield
    except _ONE_LINE_ERRORS as exc:
        if ctx.obj["debug"]:
            raise
        _fail(str(exc), EXIT_NOT_OK if isinstance(exc, CycleCancelled) else 1)


def _fail(message: str, exit_code: int) -> NoReturn:
    """End the command with ``message`` on stderr, as click shows its own errors."""
    _echo(f"Error: {message}", err=True)
    raise click.exceptions.Exit(exit_code)


def _dry_run(dry_run: bool | None) -> dict[str, bool]:
    """The settings override of ``--dry-run``: only when given, so settings can turn it on too."""
    return {"dry_run": True} if dry_run else {}


@cli.command()
@CONFIG_OPTION
@DRY_RUN_OPTION
@click.pass_context
def run(ctx: click.Context, config: Path | None, dry_run: bool | None) -> None:
    """Run the daemon until SIGTERM or SIGINT; exit 0 after a clean drain."""
    with _readable_errors(ctx):
        settings = load_settings(config, **_dry_run(dry_run))
        configure_logging(settings.log_format, settings.log_level)
        daemon.run(settings)


@cli.command()
@click.argument("marquee")
@CONFIG_OPTION
@DRY_RUN_OPTION
@JSON_OPTION
@click.pass_context
def cycle(
    ctx: click.Context, marquee: str, config: Path | None, dry_run: bool | None, as_json: bool
) -> None:
    """Run one cycle of MARQUEE now, in the foreground, under its lock as the daemon does.

    Prints a line as each phase ends and records the cycle like the daemon. Ctrl-C lets the
    running phase finish and starts no other; a second Ctrl-C cancels it. Exit status 0 when the
    cycle ends ok, 3 when another holder has the Marquee's lock (nothing is done), 4 when it ends
    otherwise (failed phase, lost lease, deadline, interrupted). With --json, one JSON object
    at the end instead: the cycle's record and, when it was locked, the holder.
    """
    console = _console()
    if as_json:
        console = Console(file=io.StringIO())  # the phase lines and the spinner go nowhere
    with _readable_errors(ctx):
        settings = load_settings(config, **_dry_run(dry_run))
        if settings.dry_run:
            console.print(f"{marquee}: dry run, nothing is changed; actions are what would be done")
        with console.status(_text(f"{marquee}: taking the lock")) as spinner:

            def show_phase(result: CycleResult, phase: str) -> None:
                console.print(_phase_line(result, phase))
                for action in result.actions.get(phase, []):
                    console.print(_text((f"      {action}", "dim")), soft_wrap=True)
                done = f"{len(result.durations)} of {len(settings.phases)} phases done"
                spinner.update(_text(f"{marquee}: {done}"))

            outcome = asyncio.run(operate.run_cycle(settings, marquee, show_phase))
    result = outcome.result
    if as_json:
        holder = None if outcome.holder is None else operate.holder_json(outcome.holder)
        click.echo(json.dumps({"cycle": result.to_record(), "holder": holder}, indent=2))
        if result.outcome is not Outcome.OK:
            ctx.exit(EXIT_LOCKED if result.outcome is Outcome.LOCKED else EXIT_NOT_OK)
        return
    if result.outcome is Outcome.LOCKED:
        held = _holder_text(outcome.holder) if outcome.holder else "another holder (gone since)"
        _fail(f"{marquee} is locked by {held}; no cycle ran", EXIT_LOCKED)
    console.print(_cycle_summary(result, settings), soft_wrap=True)
    if result.outcome is not Outcome.OK:
        ctx.exit(EXIT_NOT_OK)


def _phase_line(result: CycleResult, phase: str) -> Text:
    duration = _span(result.durations.get(phase, 0.0))
    if result.outcome is not Outcome.OK and result.phase == phase:
        reason = f"  {result.reason}" if result.reason else ""
        failed = (f"{result.outcome.value:<12}", "bold red")
        return _text(f"  {phase:<24}", failed, f"{duration:>9}{reason}")
    actions = _actions(len(result.actions.get(phase, [])))
    return _text(f"  {phase:<24}{actions:<12}{duration:>9}")


def _cycle_summary(result: CycleResult, settings: Settings) -> Text:
    actions = _actions(sum(len(taken) for taken in result.actions.values()))
    where = f" in {result.phase}" if result.phase else ""
    reason = f": {result.reason}" if result.reason else ""
    verb = "would be taken" if settings.dry_run else "taken"
    fence = "" if result.fence is None else f", fence {result.fence}"
    return _text(
        f"{result.marquee}: ",
        (f"{result.outcome.value}{where}{reason}", _outcome_style(result.outcome.value)),
        f"; {actions} {verb} in {_span(result.duration)}{fence}",
    )


@cli.command()
@CONFIG_OPTION
@JSON_OPTION
@click.option("--watch", is_flag=True, help="Refresh every --interval seconds until Ctrl-C.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.5),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes of --watch.",
)
@click.pass_context
def status(
    ctx: click.Context, config: Path | None, as_json: bool, watch: bool, interval: float
) -> None:
    """Each Marquee of the inventory: who holds its lock, and how its last cycle went.

    FENCE is the holder's while the lock is held, else the last cycle's. With --watch the table
    is redrawn in place on a terminal (in a pipe, each refresh is printed after the last).
    """
    settings = _settings(ctx, config)

    def read() -> list[operate.MarqueeStatus]:
        with _readable_errors(ctx):
            return asyncio.run(operate.fleet_status(settings))

    if as_json:
        if watch:
            _fail("--watch draws a table; leave out --json", 2)
        statuses = read()
        now = time.time()
        click.echo(json.dumps({"marquees": [s.to_json(now) for s in statuses]}, indent=2))
        return
    console = _console()
    if not watch:
        console.print(_status_table(read(), time.time()))
        return
    with contextlib.suppress(KeyboardInterrupt):
        if console.is_terminal:
            with Live(console=console, auto_refresh=False) as live:
                while True:
                    live.update(_status_table(read(), time.time()), refresh=True)
                    time.sleep(interval)
        while True:
            console.print(_status_table(read(), time.time()))
            console.print()
            time.sleep(interval)


def _settings(ctx: click.Context, config: Path | None) -> Settings:
    with _readable_errors(ctx):
        return load_settings(config)


def _status_table(statuses: list[operate.MarqueeStatus], now: float) -> Table:
    columns = ("MARQUEE", "HOLDER", "FENCE", "TTL LEFT", "LAST", "WHEN", "DURATION", "ACTIONS")
    table = Table(*columns, "FINDINGS", box=None, header_style="bold")
    for marquee in statuses:
        lock, last = marquee.lock, marquee.last
        name = marquee.name if marquee.launchable else f"{marquee.name} (not launchable)"
        holding: list[str | Text] = ["-", "-", "-"]
        if lock is not None:
            holder = lock.holder
            holding = [
                f"{holder.replica} ({holder.host}, pid {holder.pid})"
                if holder
                else f"unknown record {operate.shown_record(lock.record)}",
                _fence(lock.fence),
                _span(lock.ttl_left),
            ]
        elif last is not None and last.fence is not None:
            holding[1] = str(last.fence)
        history: list[str | Text] = [_text("never"), "-", "-", "-", "-"]
        if last is not None:
            history = [
                _last_text(last),
                "-" if last.finished_at is None else f"{_span(now - last.finished_at)} ago",
                "-" if last.duration is None else _span(last.duration),
                str(last.actions),
                _findings_text(last),
            ]
        table.add_row(name, *holding, *history)
    return table


def _last_text(last: operate.LastCycle) -> Text:
    where = f" in {last.phase}" if last.phase else ""
    style = _outcome_style(last.outcome)
    if last.dry_run:
        # Nothing was changed: drift it found is still there.
        where += " (dry run)"
        style = "yellow" if last.drift and last.outcome == "ok" else style
    return _text((last.outcome + where, style))


@cli.command()
@click.argument("marquee")
@CONFIG_OPTION
@JSON_OPTION
@_limit_option(10, "Recent cycles shown.")
@click.pass_context
def describe(
    ctx: click.Context, marquee: str, config: Path | None, as_json: bool, limit: int
) -> None:
    """MARQUEE in depth: its lock and fences, its last cycle phase by phase, what is still
    wrong and what that cycle fixed, its recent cycles. Read from Redis; nothing connects to
    the host (``check`` does)."""
    settings = _settings(ctx, config)
    with _readable_errors(ctx):
        told = asyncio.run(story.marquee_story(settings, marquee, limit=limit))
    now = time.time()
    if as_json:
        click.echo(json.dumps(told.to_json(now), indent=2))
        return
    console = _console()
    lock = told.lock
    console.print(_text(("Marquee ", "bold"), told.name))
    console.print(_text("  lock: ", "not held" if lock is None else _holder_text(lock)))
    host = None if told.last is None else told.last.host_fence
    console.print(
        _text(f"  fence: Redis {_fence(told.fence_counter)}, host {_fence(host)} (last seen)")
    )
    if told.last is None:
        console.print(_text("  last cycle: never"))
        return
    last = told.last
    ended = "-" if last.finished_at is None else f"{_span(now - last.finished_at)} ago"
    console.print(
        _text("  last cycle: ", _last_text(last).plain, f", {ended}, by {last.replica or '?'}")
    )
    for step in told.steps:
        seconds = "?" if step.seconds is None else _span(step.seconds)
        console.print(_text(f"    {step.phase}: {seconds}, {_actions(len(step.actions))}"))
        for action in step.actions:
            console.print(_text(f"      did {action}"))
        for kind, subject, detail in step.notices:
            console.print(_text(f"      {kind} {subject}: {detail}"))
        if step.more:
            console.print(_text(f"      ... {step.more} more"))
    for heading, items in (("still wrong", told.still_wrong), ("fixed", told.fixed)):
        console.print(_text(f"  {heading}: ", "none" if not items else ""))
        for item in items:
            console.print(_text(f"    {item}"))
    console.print(_text(f"  recent cycles ({len(told.history)}):"))
    _print_history(console, told.history, now)


@cli.command()
@click.argument("marquee")
@CONFIG_OPTION
@JSON_OPTION
@_limit_option(20, "Cycles shown, newest first.")
@click.pass_context
def history(
    ctx: click.Context, marquee: str, config: Path | None, as_json: bool, limit: int
) -> None:
    """MARQUEE's recorded cycles, newest first, as every replica recorded them."""
    settings = _settings(ctx, config)
    with _readable_errors(ctx):
        told = asyncio.run(story.marquee_story(settings, marquee, limit=limit))
    now = time.time()
    if as_json:
        cycles = [cycle.to_json(now) for cycle in told.history]
        click.echo(json.dumps({"name": told.name, "cycles": cycles}, indent=2))
        return
    console = _console()
    if not told.history:
        console.print(_text(f"{told.name}: no cycle recorded"))
        return
    _print_history(console, told.history, now)


def _print_history(console: Console, cycles: list[operate.LastCycle], now: float) -> None:
    table = Table("WHEN", "OUTCOME", "REPLICA", "FENCE", "DURATION", "ACTIONS", "FINDINGS",
                  box=None, header_style="bold")  # fmt: skip
    for cycle in cycles:
        table.add_row(
            "-" if cycle.finished_at is None else f"{_span(now - cycle.finished_at)} ago",
            _last_text(cycle),
            _clean(cycle.replica or "?"),
            _fence(cycle.fence),
            "-" if cycle.duration is None else _span(cycle.duration),
            str(cycle.actions),
            _clean(_findings_text(cycle)),
        )
    console.print(table)


def _findings_text(last: operate.LastCycle) -> str:
    notes = [f"reason: {last.reason}"] if last.reason else []
    # Drift a cycle found is drift it repaired, unless it was a dry run: only that is still wrong.
    drift = "drift, not fixed (dry run)" if last.dry_run else "fixed drift"
    notes += [f"{drift} {name}: {', '.join(why)}" for name, why in last.drift.items()]
    notes += [f"branch gone: {name} ({branch})" for name, branch in last.branch_gone.items()]
    notes += [f"still failing: {item}" for item in last.failed]
    return "; ".join(notes) or "none"


@cli.command()
@CONFIG_OPTION
@JSON_OPTION
@click.pass_context
def locks(ctx: click.Context, config: Path | None, as_json: bool) -> None:
    """Every lock held now: its name, holder, fence and time left."""
    with _readable_errors(ctx):
        held = asyncio.run(operate.held_locks(load_settings(config)))
    if as_json:
        click.echo(json.dumps({"locks": [operate.holder_json(state) for state in held]}, indent=2))
        return
    console = _console()
    if not held:
        console.print("no lock is held")
        return
    columns = ("LOCK", "REPLICA", "HOST", "PID", "ACQUIRED", "FENCE", "TTL LEFT")
    table = Table(*columns, box=None, header_style="bold")
    for state in held:
        holder = state.holder
        fields = (
            (holder.replica, holder.host, str(holder.pid), holder.acquired_at)
            if holder
            else (f"unknown record {operate.shown_record(state.record)}", "-", "-", "-")
        )
        table.add_row(state.name, *fields, _fence(state.fence), _span(state.ttl_left))
    console.print(table)


@cli.command()
@click.argument("marquee")
@CONFIG_OPTION
@click.option(
    "--force", is_flag=True, help="Delete the lock key, if it still holds the record shown."
)
@click.pass_context
def unlock(ctx: click.Context, marquee: str, config: Path | None, force: bool) -> None:
    """Say what deleting MARQUEE's lock would remove; with --force, delete it.

    Only for a holder that is gone for good (its host died, its process was killed): a live
    holder keeps working until its next renewal fails. With --force the key is deleted only if
    it still holds the record shown, never another holder's. The fence counter is never deleted,
    so the next holder's fence is still higher. Exit status 0 when the Marquee is not locked (any
    more), 1 when the lock is still held (without --force, or taken by another holder meanwhile).
    """
    with _readable_errors(ctx):
        done = asyncio.run(operate.unlock(load_settings(config), marquee, force=force))
    if done.found is None:
        _echo(f"{marquee} is not locked (no key {done.key}); nothing to delete")
        return
    shown = f"{done.key}: held by {_holder_text(done.found)}"
    kept = f"the fence counter {done.fence_key} stays at {_fence(done.found.fence)}"
    if done.result is None:
        _echo(f"would delete {shown}\n{kept}\nnothing deleted: add --force to delete it")
        ctx.exit(1)
    if done.result is ReleaseResult.RELEASED:
        _echo(f"deleted {shown}\n{kept}")
    elif done.result is ReleaseResult.EXPIRED:
        _echo(f"nothing deleted: {done.key} was released or expired after it was read")
    else:
        _echo(f"nothing deleted: another holder took {done.key} after it was read")
        ctx.exit(1)


@cli.command()
@CONFIG_OPTION
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds each Marquee's checks may take.",
)
@JSON_OPTION
@click.pass_context
def check(ctx: click.Context, config: Path | None, timeout: float, as_json: bool) -> None:
    """Check settings, inventory, Redis, every Marquee (SSH host key, login, Docker API
    through the tunnel, compose) and every registry (its password source, a login from a
    Marquee that pulls from it) without changing anything; exit status 1 if any check fails.

    Marquees and registries are checked at once, max_concurrent_cycles at a time.
    """
    with _readable_errors(ctx):
        rows = asyncio.run(operate.check(config, timeout=timeout))
    if as_json:
        checks = [{"subject": row.subject, "ok": row.ok, "detail": row.detail} for row in rows]
        click.echo(json.dumps({"ok": all(row.ok for row in rows), "checks": checks}, indent=2))
        if not all(row.ok for row in rows):
            ctx.exit(1)
        return
    table = Table("CHECK", "VERDICT", "DETAIL", box=None, header_style="bold")
    table.columns[2].overflow = "fold"
    for row in rows:
        verdict = _text(("ok", "green") if row.ok else ("FAIL", "bold red"))
        table.add_row(row.subject, verdict, row.detail)
    _console().print(table)
    if not all(row.ok for row in rows):
        ctx.exit(1)


class _DataConsole(Console):
    """A console that prints data as data: no rich markup (``[/x]`` in a name would end a style
    that was never opened and crash), no emoji codes, and control characters (a terminal escape
    in a host's output, a record in Redis) shown escaped rather than sent to the terminal."""

    def __init__(self, **options: Any) -> None:
        super().__init__(highlight=False, markup=False, emoji=False, **options)

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(_clean(text), **options)


def _console() -> Console:
    """Output fitted to a terminal's width; in a pipe or a file, whole lines that grep can find."""
    console = _DataConsole()
    return console if console.is_terminal else _DataConsole(width=_PIPE_WIDTH)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _clean(text: str) -> str:
    """``text`` with every control character but newline and tab written as ``\\xNN``."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match[0]):02x}", text)


def _text(*parts: str | tuple[str, str]) -> Text:
    """Styled text from data: each part (a string, or a string and its style) cleaned."""
    return Text.assemble(
        *(_clean(part) if isinstance(part, str) else (_clean(part[0]), part[1]) for part in parts)
    )


def _echo(message: str, *, err: bool = False) -> None:
    click.echo(_clean(message), err=err)


def _fence(fence: int | None) -> str:
    return "?" if fence is None else str(fence)


def _holder_text(state: LockState) -> str:
    holder = state.holder
    held = (
        f"replica {holder.replica} (host {holder.host}, pid {holder.pid}, since "
        f"{holder.acquired_at})"
        if holder
        else f"an unknown record {operate.shown_record(state.record)}"
    )
    return f"{held}, fence {_fence(state.fence)}, {_span(state.ttl_left)} left"


def _actions(count: int) -> str:
    return f"{count} action" + ("" if count == 1 else "s")


def _outcome_style(outcome: str) -> str:
    return {"ok": "green", "locked": "yellow", "interrupted": "yellow"}.get(outcome, "bold red")


def _span(seconds: float) -> str:
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


@cli.command()
@click.option("--marquees", default=2, show_default=True, help="Simulated Docker hosts.")
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where the lab keeps its servers' files (default: a new temporary directory).",
)
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
@click.option("--tick", type=float, default=10.0, show_default=True, help="Tick interval.")
@click.option(
    "--desired-state",
    type=click.Choice(["yaml", "postgres"]),
    default="yaml",
    show_default=True,
    help="Read the desired state from the YAML file or from a lab PostgreSQL.",
)
def lab(
    marquees: int, workdir: Path | None, duration: float | None, tick: float, desired_state: str
) -> None:
    """Start a lab of real servers on loopback and run the daemon against it.

    Redis, one sshd + dockerd per Marquee, a registry with auth and a git origin; everything
    is stopped on exit. Needs root and the Debian packages that scripts/install.sh installs.
    """
    try:
        from playguard_async.lab import (  # noqa: PLC0415 - not the daemon's
            Lab,
            PostgresServer,
            move_desired_state_to_postgres,
            write_demo_config,
        )
    except ModuleNotFoundError as missing:
        if missing.name != "playguard_async.lab":
            raise
        _fail("the lab is not part of this installation (the container image leaves it out)", 1)

    with contextlib.ExitStack() as stack:
        root = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pg-lab-")))
        running = stack.enter_context(Lab(root / "servers", marquees=marquees))
        config = write_demo_config(running, root / "config", tick_interval=tick)
        if desired_state == "postgres":
            database = stack.enter_context(PostgresServer(root / "servers" / "postgres"))
            move_desired_state_to_postgres(database, config)
        _echo(f"lab up in {root}; settings {config}", err=True)
        settings = load_settings(config)
        configure_logging(settings.log_format, settings.log_level)
        daemon.run(settings, stop_after=duration)


cli.add_command(db)


def main() -> None:
    cli(prog_name="playguard")


if __name__ == "__main__":
    main()
