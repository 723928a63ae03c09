"""The ``playguard`` command: argument parsing and output only; the work is in ``operate``.

Exit statuses: 0 done (a cycle ended ok, every check passed); 1 an error a person can fix, a
failed check, or ``unlock`` that deleted nothing; 2 bad usage; 3 ``cycle`` found the Marquee
locked by another holder; 4 ``cycle`` ran but did not end ok; 78 (sysexits' EX_CONFIG) ``run``
could not start on its configuration (settings, inventory, phases), which the systemd unit does
not restart on. A crash (a bug) is Python's own 1 with a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from playguard_async import __version__
from playguard_async.cli_options import CONFIG_OPTION
from playguard_async.db_cli import db
from playguard_async.textclean import clean

if TYPE_CHECKING:
    from playguard_async.settings import Settings

# Everything else is imported by the command that needs it: `--version` and `--help` load click
# and nothing of the engine, Redis, SSH or rich (1.1 s of imports before; bench/cli_startup.py).

EXIT_LOCKED = 3
EXIT_NOT_OK = 4
EXIT_CONFIG = 78

DRY_RUN_OPTION = click.option(
    "--dry-run", is_flag=True, default=None, help="Report what would change; change nothing."
)
JSON_OPTION = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON with stable keys, for scripts."
)

_F = TypeVar("_F", bound=Callable[..., Any])


def _limit_option(default: int, help_text: str) -> Callable[[_F], _F]:
    """``--limit N`` of the commands that read a Marquee's recorded cycles."""
    return click.option(
        "--limit", type=click.IntRange(1, 1000), default=default, show_default=True, help=help_text
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


@contextlib.contextmanager
def _readable_errors(ctx: click.Context, *, config_status: int = 1) -> Iterator[None]:
    """Errors a person can fix (settings, inventory, Redis...) as one line, unless ``--debug``;
    a configuration error exits ``config_status``.

    Also quiets the log: the operator commands print for a person, and the engine's own log
    would only repeat it (`run` and `lab` set the log up again from their settings)."""
    from playguard_async import operate
    from playguard_async.engine import CycleCancelled
    from playguard_async.inventory import InventoryError
    from playguard_async.observe import configure_logging
    from playguard_async.phase import UnknownPhase
    from playguard_async.settings import SettingsError

    configure_logging("console", "debug" if ctx.obj["debug"] else "critical")
    config_errors = (SettingsError, InventoryError, UnknownPhase)
    try:
        yield
    except (*config_errors, operate.OperateError, CycleCancelled) as exc:
        if isinstance(exc, CycleCancelled):
            status = EXIT_NOT_OK
        else:
            status = config_status if isinstance(exc, config_errors) else 1
        if ctx.obj["debug"]:
            import traceback

            traceback.print_exc()
            raise click.exceptions.Exit(status) from None
        _fail(str(exc), status)


def _fail(message: str, exit_code: int) -> NoReturn:
    """End the command with ``message`` on stderr, as click shows its own errors."""
    _echo(f"Error: {message}", err=True)
    raise click.exceptions.Exit(exit_code)


def _echo(message: str, *, err: bool = False) -> None:
    click.echo(clean(message), err=err)


def _dry_run(dry_run: bool | None) -> dict[str, bool]:
    """The settings override of ``--dry-run``: only when given, so settings can turn it on too."""
    return {"dry_run": True} if dry_run else {}


def _settings(config: Path | None, **overrides: bool) -> Settings:
    from playguard_async.settings import load_settings

    return load_settings(config, **overrides)


@cli.command()
@CONFIG_OPTION
@DRY_RUN_OPTION
@click.pass_context
def run(ctx: click.Context, config: Path | None, dry_run: bool | None) -> None:
    """Run the daemon until SIGTERM or SIGINT; exit 0 after a clean drain, 78 when the settings,
    the inventory or the phases they name cannot be used (so systemd does not restart it)."""
    with _readable_errors(ctx, config_status=EXIT_CONFIG):
        from playguard_async import daemon
        from playguard_async.observe import configure_logging

        settings = _settings(config, **_dry_run(dry_run))
        configure_logging(settings.log_format, settings.log_level, final=True)
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
    otherwise (failed phase, unreachable, lost lease, deadline, interrupted). With --json, one
    JSON object at the end instead: the cycle's record and, when it was locked, the holder.
    """
    with _readable_errors(ctx):
        import asyncio
        import io
        import json

        from rich.console import Console

        from playguard_async import display, operate
        from playguard_async.engine import CycleResult, Outcome

        # With --json the phase lines and the spinner go nowhere.
        console = Console(file=io.StringIO()) if as_json else display.console()
        settings = _settings(config, **_dry_run(dry_run))
        if settings.dry_run:
            console.print(f"{marquee}: dry run, nothing is changed; actions are what would be done")
        with console.status(display.text(f"{marquee}: taking the lock")) as spinner:

            def show_phase(result: CycleResult, phase: str) -> None:
                console.print(display.phase_line(result, phase))
                for action in result.actions.get(phase, []):
                    console.print(display.text((f"      {action}", "dim")), soft_wrap=True)
                done = f"{len(result.durations)} of {len(settings.phases)} phases done"
                spinner.update(display.text(f"{marquee}: {done}"))

            outcome = asyncio.run(operate.run_cycle(settings, marquee, show_phase))
    result = outcome.result
    if as_json:
        holder = None if outcome.holder is None else operate.holder_json(outcome.holder)
        click.echo(json.dumps({"cycle": result.to_record(), "holder": holder}, indent=2))
        if result.outcome is not Outcome.OK:
            ctx.exit(EXIT_LOCKED if result.outcome is Outcome.LOCKED else EXIT_NOT_OK)
        return
    if result.outcome is Outcome.LOCKED:
        held = (
            display.holder_text(outcome.holder) if outcome.holder else "another holder (gone since)"
        )
        _fail(f"{marquee} is locked by {held}; no cycle ran", EXIT_LOCKED)
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
    is redrawn in place on a terminal (in a pipe, each refresh is printed after the last).
    """
    if as_json and watch:
        _fail("--watch draws a table; leave out --json", 2)
    with _readable_errors(ctx):
        import asyncio
        import json
        import time

        from rich.live import Live

        from playguard_async import display, operate

        settings = _settings(config)

        def read() -> list[operate.MarqueeStatus]:
            with _readable_errors(ctx):
                return asyncio.run(operate.fleet_status(settings))

        statuses = read()
    if as_json:
        now = time.time()
        click.echo(json.dumps({"marquees": [s.to_json(now) for s in statuses]}, indent=2))
        return
    console = display.console()
    table = display.status_table(statuses, time.time())
    if not (watch and console.is_terminal):
        console.print(table)
    if not watch:
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
    with _readable_errors(ctx):
        import asyncio
        import json
        import time

        from playguard_async import display, story

        told = asyncio.run(story.marquee_story(_settings(config), marquee, limit=limit))
    now = time.time()
    if as_json:
        click.echo(json.dumps(told.to_json(now), indent=2))
        return
    display.print_story(told, now)


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
    with _readable_errors(ctx):
        import asyncio
        import json
        import time

        from playguard_async import display, story

        told = asyncio.run(story.marquee_story(_settings(config), marquee, limit=limit))
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
    with _readable_errors(ctx):
        import asyncio
        import json

        from rich.table import Table

        from playguard_async import display, operate

        held = asyncio.run(operate.held_locks(_settings(config)))
    if as_json:
        click.echo(json.dumps({"locks": [operate.holder_json(state) for state in held]}, indent=2))
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
            else (f"unknown record {operate.shown_record(state.record)}", "-", "-", "-")
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
    it still holds the record shown, never another holder's. The fence counter is never deleted,
    so the next holder's fence is still higher. Exit status 0 when the Marquee is not locked (any
    more), 1 when the lock is still held (without --force, or taken by another holder meanwhile)
    or MARQUEE is not in the inventory.
    """
    with _readable_errors(ctx):
        import asyncio

        from playguard_async import display, operate
        from playguard_async.lock import ReleaseResult

        done = asyncio.run(operate.unlock(_settings(config), marquee, force=force))
    if done.found is None:
        _echo(f"{marquee} is not locked (no key {done.key}); nothing to delete")
        return
    shown = f"{done.key}: held by {display.holder_text(done.found)}"
    kept = f"the fence counter {done.fence_key} stays at {display.fence_text(done.found.fence)}"
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
        import asyncio

        from rich.table import Table

        from playguard_async import display, operate

        rows = asyncio.run(operate.check(config, timeout=timeout))
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


MARQUEES_OPTION = click.option(
    "--marquees",
    type=click.IntRange(1, 55),
    default=2,
    show_default=True,
    help="Simulated Docker hosts (marquee-0, marquee-1, ...).",
)
TICK_OPTION = click.option(
    "--tick",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="The daemon's tick interval, in the settings written.",
)
DESIRED_STATE_OPTION = click.option(
    "--desired-state",
    type=click.Choice(["yaml", "postgres"]),
    default="yaml",
    show_default=True,
    help="Read the desired state from the YAML file or from a lab PostgreSQL.",
)
LAB_DIR_OPTION = click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    envvar="PLAYGUARD_LAB_DIR",
    show_envvar=True,
    help="The lab's directory: servers, settings, state  [default: ~/.local/state/playguard-lab]",
)


def _require_lab() -> None:
    """The container image leaves the lab out: say so, instead of a traceback."""
    import importlib.util

    if importlib.util.find_spec("playguard_async.lab") is None:
        _fail("the lab is not part of this installation (the container image leaves it out)", 1)


@cli.group()
def lab() -> None:
    """A lab of real servers on loopback: Redis, one sshd + dockerd per Marquee, a registry
    with auth and a git origin. Needs root and the Debian packages scripts/install.sh installs.

    `lab up` starts it and leaves it running for commands typed by hand, `lab down` stops it;
    `lab run` starts it, runs the daemon against it and stops everything on exit.
    """


@lab.command("run")
@MARQUEES_OPTION
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where the lab keeps its servers' files (default: a new temporary directory).",
)
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
@TICK_OPTION
@DESIRED_STATE_OPTION
def lab_run(
    marquees: int, workdir: Path | None, duration: float | None, tick: float, desired_state: str
) -> None:
    """Start the lab, run the daemon against it until --duration or Ctrl-C, stop everything."""
    _require_lab()
    import tempfile

    from playguard_async import daemon
    from playguard_async.lab import (
        Lab,
        PostgresServer,
        move_desired_state_to_postgres,
        write_demo_config,
    )
    from playguard_async.observe import configure_logging

    with contextlib.ExitStack() as stack:
        root = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pg-lab-")))
        running = stack.enter_context(Lab(root / "servers", marquees=marquees))
        config = write_demo_config(running, root / "config", tick_interval=tick)
        if desired_state == "postgres":
            database = stack.enter_context(PostgresServer(root / "servers" / "postgres"))
            move_desired_state_to_postgres(database, config)
        _echo(f"lab running in {root}; settings {config}", err=True)
        settings = _settings(config)
        configure_logging(settings.log_format, settings.log_level, final=True)
        daemon.run(settings, stop_after=duration)


@contextlib.contextmanager
def _lab_errors() -> Iterator[None]:
    """What stops ``lab up``/``down`` (a missing program, a server that would not start, a
    directory or state file it cannot use) as ``Error: ...`` and exit status 1."""
    from playguard_async.lab import LabCommandFailed, MissingBinary, ServerStartFailed
    from playguard_async.lab.detached import LabStateError
    from playguard_async.lab.postgres import ClusterUnreachable

    refused = (
        LabStateError, MissingBinary, ServerStartFailed, LabCommandFailed, ClusterUnreachable
    )  # fmt: skip
    try:
        yield
    except refused as exc:
        _fail(str(exc), 1)
    except OSError as exc:
        _fail(f"{exc.filename or 'lab'}: {exc.strerror or exc}", 1)


@lab.command("up")
@LAB_DIR_OPTION
@MARQUEES_OPTION
@TICK_OPTION
@DESIRED_STATE_OPTION
def lab_up(directory: Path | None, marquees: int, tick: float, desired_state: str) -> None:
    """Start the lab's servers and leave them running; print the settings to export.

    Writes the daemon's settings and a state file (each server's PID and start time) into
    --dir. On stdout only the `export PLAYGUARD_CONFIG=...` line, so `eval "$(playguard lab
    up)"` works; what to try next goes to stderr. Exit status 1 when a lab already runs there.
    """
    _require_lab()
    import shlex

    from playguard_async.lab.detached import default_directory
    from playguard_async.lab.detached import lab_up as start_lab

    where = directory or default_directory()
    with _lab_errors():
        started = start_lab(
            where, marquees=marquees, tick_interval=tick, postgres=desired_state == "postgres"
        )
    names = [marquee.name for marquee in started.lab.marquees]
    down = "playguard lab down" + ("" if directory is None else f" --dir {shlex.quote(str(where))}")
    pids = ", ".join(server.label for server in started.state.servers)
    _echo(f"export PLAYGUARD_CONFIG={shlex.quote(str(started.settings))}")
    _echo(
        f"lab up in {where}: Redis {started.lab.redis.url}, Marquees {', '.join(names)}, "
        f"registry {started.lab.registry.address}, git origin {started.lab.git.url}\n"
        f"servers (pid): {pids}\n"
        "type the export line above, then try:\n"
        "  playguard check\n"
        f"  playguard cycle {names[0]}\n"
        "  playguard status\n"
        f"  playguard describe {names[0]}\n"
        f"  playguard history {names[0]}\n"
        "  playguard run          # the daemon, every Marquee each tick; Ctrl-C to stop\n"
        f"  {down}",
        err=True,
    )


@lab.command("down")
@LAB_DIR_OPTION
def lab_down(directory: Path | None) -> None:
    """Stop the servers `lab up` started in --dir and remove its servers, settings and state.

    A PID that is no longer the process `lab up` started (it exited, or the PID was reused) is
    not signalled. With no lab there, says so and exits 0.
    """
    _require_lab()
    from playguard_async.lab.detached import default_directory
    from playguard_async.lab.detached import lab_down as stop_lab

    where = directory or default_directory()
    with _lab_errors():
        done = stop_lab(where)
    if not done.found:
        _echo(f"no lab is running in {where}; nothing to stop")
        return
    for server in done.gone:
        _echo(f"{server.label}: no longer the process `lab up` started; not signalled")
    stopped = ", ".join(server.label for server in done.stopped) or "none"
    _echo(f"lab down: stopped {stopped}; removed its state from {where}")


cli.add_command(db)


def main() -> None:
    cli(prog_name="playguard")


if __name__ == "__main__":
    main()
