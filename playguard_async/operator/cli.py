"""The ``playguard`` command: parsing and output; the work is in ``fleet`` and ``describe``.

Exit statuses: 0 done (a cycle ended ok, every check passed); 1 an error a person can fix, a failed
check, ``unlock`` that deleted nothing, or ``why`` that could not read the host's journal or the
change log; 2 bad usage; 3 ``cycle`` found the Marquee locked by another holder; 4 ``cycle`` ran
but did not end ok; ``plan`` has its own (0 in sync, 2 changes pending, 1 an error, as
Terraform's -detailed-exitcode); 78 (sysexits' EX_CONFIG) ``run`` could not start on its
configuration (settings, inventory, phases), which the systemd unit does not restart on. A crash
(a bug) is Python's own 1 with a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from playguard_async import __version__
from playguard_async.operator.audit import audit
from playguard_async.operator.command_kit import (
    DRY_RUN_OPTION,
    EXIT_CONFIG,
    EXIT_LOCKED,
    EXIT_NOT_OK,
    JSON_OPTION,
    command_settings,
    dry_run_override,
    duration_option,
    echo,
    fail,
    one_scope,
    readable_errors,
)
from playguard_async.operator.db import db
from playguard_async.operator.options import CONFIG_OPTION
from playguard_async.operator.steering_cli import STEERING_COMMANDS

if TYPE_CHECKING:
    pass

# Everything else is imported by the command that needs it: `--version` and `--help` load click
# and nothing of the engine, Redis, SSH or rich (bench/cli_startup.py, bench/README.md).

_F = TypeVar("_F", bound=Callable[..., Any])


def _limit_option(default: int, help_text: str) -> Callable[[_F], _F]:
    """``--limit N`` of the commands that read a Marquee's recorded cycles."""
    return click.option(
        "--limit", type=click.IntRange(1, 1000), default=default, show_default=True, help=help_text
    )


LAB_COMMAND = "playguard_lab.command"
"""Where ``playguard lab`` lives: the lab is its own package beside this one in the repository (a
clone installs both), and the wheel and the container image leave it out."""


class _Commands(click.Group):
    """The commands, with ``lab`` joining from ``playguard_lab`` when it is installed: it is
    loaded by name at run time, so nothing in the runtime package imports the lab."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), "lab"])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name != "lab":
            return super().get_command(ctx, cmd_name)
        import importlib
        import importlib.util

        if importlib.util.find_spec("playguard_lab") is None:
            return _lab_missing
        command: click.Command = importlib.import_module(LAB_COMMAND).lab
        return command


@click.command(
    "lab",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
def _lab_missing() -> None:
    """A lab of real servers on loopback (not part of this installation)."""
    fail("the lab is not part of this installation (the container image leaves it out)", 1)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="playguard")
@click.option(
    "--debug", is_flag=True, help="Show tracebacks instead of one-line errors, and the log."
)
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Keep a fleet of Docker hosts true to their desired state, one leased reconciler per host."""
    ctx.obj = {"debug": debug}


@cli.command()
@CONFIG_OPTION
@DRY_RUN_OPTION
@click.pass_context
def run(ctx: click.Context, config: Path | None, dry_run: bool | None) -> None:
    """Run the daemon until SIGTERM or SIGINT; exit 0 after a clean drain, 78 when the settings,
    the inventory or the phases they name cannot be used (so systemd does not restart it)."""
    with readable_errors(ctx, config_status=EXIT_CONFIG):
        from playguard_async.operator.web_desk import CliDesk
        from playguard_async.operator.why import timeline_reader
        from playguard_async.service import daemon
        from playguard_async.service.logs import configure_logging

        settings = command_settings(config, **dry_run_override(dry_run))
        configure_logging(settings.log_format, settings.log_level, final=True)
        daemon.run(settings, desk=CliDesk(settings), read_timeline=timeline_reader(settings))


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
    cycle ends ok, 3 when another holder has the Marquee's lock (nothing is done), 4 when it ran
    but ended otherwise than ok (phase_failed, unhealthy, unreachable, lock_lost, deadline,
    interrupted, paused, error), 1 on an error (settings, inventory, Redis away). With --json, one
    JSON object at the end instead: the cycle's record and, when it was locked, the holder.
    """
    with readable_errors(ctx):
        import asyncio
        import io
        import json

        from rich.console import Console

        from playguard_async.coordination import marquee_reads
        from playguard_async.engine.results import CycleResult, Outcome
        from playguard_async.operator import display
        from playguard_async.operator.cycle import run_cycle

        # With --json the phase lines and the spinner go nowhere.
        console = Console(file=io.StringIO()) if as_json else display.console()
        settings = command_settings(config, **dry_run_override(dry_run))
        if settings.dry_run:
            console.print(f"{marquee}: dry run, nothing is changed; actions are what would be done")
        with console.status(display.text(f"{marquee}: taking the lock")) as spinner:

            def show_phase(result: CycleResult, phase: str) -> None:
                console.print(display.phase_line(result, phase))
                for action in result.actions.get(phase, []):
                    console.print(display.text((f"      {action}", "dim")), soft_wrap=True)
                done = f"{len(result.durations)} of {len(settings.phases)} phases done"
                spinner.update(display.text(f"{marquee}: {done}"))

            outcome = asyncio.run(run_cycle(settings, marquee, show_phase))
    result = outcome.result
    if as_json:
        holder = None if outcome.holder is None else marquee_reads.holder_json(outcome.holder)
        click.echo(json.dumps({"cycle": result.to_record(), "holder": holder}, indent=2))
        if result.outcome is not Outcome.OK:
            ctx.exit(EXIT_LOCKED if result.outcome is Outcome.LOCKED else EXIT_NOT_OK)
        return
    if result.outcome is Outcome.LOCKED:
        held = (
            display.holder_text(outcome.holder) if outcome.holder else "another holder (gone since)"
        )
        fail(f"{marquee} is locked by {held}; no cycle ran", EXIT_LOCKED)
    console.print(display.cycle_summary(result, settings), soft_wrap=True)
    if result.outcome is not Outcome.OK:
        ctx.exit(EXIT_NOT_OK)


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
    is redrawn in place on a terminal (in a pipe, each refresh is printed after the last). A key
    of a Marquee that holds another Redis type than playguard writes there (a hash where its
    pause should be) is that Marquee's line "unreadable: <key> holds a hash" (in --json, its
    "unreadable" list); the exit status stays 0, as for any other value read.
    """
    if as_json and watch:
        fail("--watch draws a table; leave out --json", 2)
    with readable_errors(ctx):
        import asyncio
        import json
        import time

        from rich.live import Live

        from playguard_async.coordination import marquee_reads
        from playguard_async.coordination.replicas import mix_of
        from playguard_async.operator import display
        from playguard_async.operator import rollout as rollouts
        from playguard_async.operator.status import fleet_status

        settings = command_settings(config)

        def read() -> list[marquee_reads.MarqueeStatus]:
            with readable_errors(ctx):
                return asyncio.run(fleet_status(settings))

        statuses = read()
        unfinished = asyncio.run(rollouts.unfinished(settings)) if not watch else []
        replicas = asyncio.run(rollouts.replicas(settings)) if not watch else []
    mixed = mix_of([version for _, version in replicas])
    if as_json:
        now = time.time()
        shown = {"marquees": [s.to_json(now) for s in statuses],
                 "rollouts": [rollouts.as_json(r) for r in unfinished],
                 "replicas": [{"replica": r, "version": v} for r, v in replicas],
                 "versions_mixed": mixed}  # fmt: skip
        click.echo(json.dumps(shown, indent=2))
        return
    console = display.console()
    table = display.status_table(statuses, time.time())
    if not (watch and console.is_terminal):
        console.print(table)
    if not watch:
        for record in unfinished:
            console.print(display.text(f"rollout {rollouts.summary(record)}"), soft_wrap=True)
        if mixed is not None:
            line = f"replicas: {mixed}: rollouts start no new wave"
            console.print(display.text(line), soft_wrap=True)
        return
    with contextlib.suppress(KeyboardInterrupt):
        if console.is_terminal:
            # The first table is drawn at once, then each refresh over it: never a blank screen
            # for an interval, and the scrollback is not filled with copies.
            console.clear()
            with Live(table, console=console, auto_refresh=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(display.status_table(read(), time.time()), refresh=True)
        while True:
            time.sleep(interval)
            console.print()
            console.print(display.status_table(read(), time.time()))


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
    with readable_errors(ctx):
        import asyncio
        import json
        import time

        from playguard_async.operator import describe, display
        from playguard_async.operator import rollout as rollouts

        settings = command_settings(config)
        told = asyncio.run(describe.marquee_story(settings, marquee, limit=limit))
        theirs = asyncio.run(rollouts.of_marquee(settings, marquee))
    now = time.time()
    if as_json:
        story = told.to_json(now)
        story["rollouts"] = [
            {**rollouts.as_json(record), "marquee_wave": wave + 1} for record, wave in theirs
        ]
        click.echo(json.dumps(story, indent=2))
        return
    display.print_story(told, now)
    for record, wave in theirs:
        display.console().print(
            display.text(f"  rollout {rollouts.summary(record)}; this Marquee in wave {wave + 1}"),
            soft_wrap=True,
        )


@cli.command()
@click.argument("marquee")
@click.argument("playground", required=False)
@click.option("--since", default="24h", show_default=True, metavar="DURATION",
              help="How far back (90s, 15m, 2h, 1d; up to 7d).")  # fmt: skip
@CONFIG_OPTION
@JSON_OPTION
@click.pass_context
def why(
    ctx: click.Context,
    *,
    marquee: str,
    playground: str | None,
    since: str,
    config: Path | None,
    as_json: bool,
) -> None:
    """Why MARQUEE (or its PLAYGROUND) changed: one timeline, oldest first, of the cycles that
    acted (replica, fence, outcome, the desired state they read, causes) with the writes its
    host accepted, read back from the host's journal and joined on cycle id; of the inputs each
    cycle included (PostgreSQL's change log with its actors, a YAML file's new versions); and of
    operators' actions (pause, resume, pin, unpin, unlock, rollout commands). A host write whose
    cycle Redis no longer holds still shows, marked; each input joins the cycle whose record
    says it first read it, never by time. Exit status 1 when the host's journal or the change
    log could not be read, or the journal was cut after --since (what the other sources had is
    printed, and where the journal begins)."""
    seconds = duration_option("--since", since)
    assert seconds is not None  # the option has a default
    with readable_errors(ctx):
        import asyncio
        import json
        import time

        from playguard_async.operator import display
        from playguard_async.operator.why import marquee_timeline

        told = asyncio.run(
            marquee_timeline(
                command_settings(config),
                marquee,
                playground=playground,
                since=time.time() - seconds,
            )
        )
    if as_json:
        click.echo(json.dumps(told.to_json(), indent=2))
    else:
        for line in display.timeline_lines(told):
            echo(line)
    if not told.complete:
        ctx.exit(1)


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
    with readable_errors(ctx):
        import asyncio
        import json
        import time

        from playguard_async.operator import describe, display

        told = asyncio.run(describe.marquee_story(command_settings(config), marquee, limit=limit))
    now = time.time()
    if as_json:
        cycles = [cycle.to_json(now) for cycle in told.history]
        click.echo(json.dumps({"name": told.name, "cycles": cycles}, indent=2))
        return
    console = display.console()
    if not told.history:
        console.print(display.text(f"{told.name}: no cycle recorded"))
        return
    console.print(display.history_table(told.history, now))


@cli.command()
@CONFIG_OPTION
@JSON_OPTION
@click.pass_context
def locks(ctx: click.Context, config: Path | None, as_json: bool) -> None:
    """Every lock held now: its name, holder, fence and time left."""
    with readable_errors(ctx):
        import asyncio
        import json

        from rich.table import Table

        from playguard_async.coordination import marquee_reads
        from playguard_async.operator import display
        from playguard_async.operator.locks import held_locks

        held = asyncio.run(held_locks(command_settings(config)))
    if as_json:
        click.echo(
            json.dumps({"locks": [marquee_reads.holder_json(state) for state in held]}, indent=2)
        )
        return
    console = display.console()
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
            else (marquee_reads.unknown_holder(state), "-", "-", "-")
        )
        table.add_row(
            state.name, *fields, display.fence_text(state.fence), display.span(state.ttl_left)
        )
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
    it still holds the record shown, never another holder's; a lock key of another Redis type (a
    hash, a list...) holds no record to compare and is never deleted. The fence counter is never
    deleted, so the next holder's fence is still higher. Exit status 0 when the Marquee is not
    locked (any more), 1 when the lock is still held (without --force, taken by another holder
    meanwhile, or a key of another type) or MARQUEE is not in the inventory.
    """
    with readable_errors(ctx):
        import asyncio

        from playguard_async.operator.unlock import unlock_lines, unlock_marquee

        done = asyncio.run(unlock_marquee(command_settings(config), marquee, force=force))
    lines, unlocked = unlock_lines(marquee, done)
    echo("\n".join(lines))
    if not unlocked:
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
    with readable_errors(ctx):
        import asyncio

        from rich.table import Table

        from playguard_async.operator import display
        from playguard_async.operator.check import run_checks

        rows = asyncio.run(run_checks(config, timeout=timeout))
    if as_json:
        import json

        checks = [{"subject": row.subject, "ok": row.ok, "detail": row.detail} for row in rows]
        click.echo(json.dumps({"ok": all(row.ok for row in rows), "checks": checks}, indent=2))
        if not all(row.ok for row in rows):
            ctx.exit(1)
        return
    table = Table("CHECK", "VERDICT", "DETAIL", box=None, header_style="bold")
    table.columns[2].overflow = "fold"
    for row in rows:
        verdict = display.text(("ok", "green") if row.ok else ("FAIL", "bold red"))
        table.add_row(row.subject, verdict, row.detail)
    display.console().print(table)
    if not all(row.ok for row in rows):
        ctx.exit(1)


@cli.command()
@click.argument("marquee", required=False)
@click.option("--all", "fleet_wide", is_flag=True, help="Every Marquee, one line each.")
@CONFIG_OPTION
@JSON_OPTION
@click.pass_context
def plan(
    ctx: click.Context, marquee: str | None, fleet_wide: bool, config: Path | None, as_json: bool
) -> None:
    """What a cycle of MARQUEE would change, grouped by phase: one detect cycle (a dry run)
    under its lock, recorded like any cycle; nothing on the host changes.

    Exit status (Terraform's -detailed-exitcode): 0 in sync, 2 changes pending, 1 an error
    (unreachable, locked by another holder, paused, a failed phase, an unknown Marquee). With
    --all, every Marquee that runs cycles, max_concurrent_cycles at once, one line each; the
    status is 1 if any errs, else 2 if any has changes, else 0.
    """
    marquee = one_scope(marquee, fleet_wide)
    with readable_errors(ctx):
        import asyncio
        import json

        from playguard_async.operator import display
        from playguard_async.operator.plan import plan_fleet, plan_one
        from playguard_async.operator.plan_verdict import PlanVerdict, plan_json, plan_verdict

        settings = command_settings(config)
        if marquee is None:
            results = asyncio.run(plan_fleet(settings))
            holder = None
        else:
            run = asyncio.run(plan_one(settings, marquee))
            results, holder = [run.result], run.holder
    verdicts = [plan_verdict(result) for result in results]
    if as_json:
        plans = [plan_json(result) for result in results]
        click.echo(json.dumps(plans[0] if marquee else {"marquees": plans}, indent=2))
    elif marquee is None:
        for result in results:
            echo(display.plan_line(result))
    else:
        display.print_plan(results[0], holder)
    worst = (
        PlanVerdict.ERROR
        if PlanVerdict.ERROR in verdicts
        else max(verdicts, default=PlanVerdict.IN_SYNC)
    )
    ctx.exit(worst.value)


for command in STEERING_COMMANDS:
    cli.add_command(command)
cli.add_command(db)
cli.add_command(audit)


def main() -> None:
    """The ``playguard`` command, the daemon's too (``playguard run``, ``python -m
    playguard_async``): dependency warnings a person cannot act on are filtered first, before any
    command imports the dependency that raises them."""
    from playguard_async.kits.dependency_warnings import filter_known_dependency_warnings

    filter_known_dependency_warnings()
    cli(prog_name="playguard")


if __name__ == "__main__":
    main()
