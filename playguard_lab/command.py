"""``playguard lab``: a lab of real servers on loopback for trying every command by hand.

It joins the ``playguard`` command from here (``playguard_async.operator.cli`` finds it by name),
so the runtime package never imports the lab. Each command imports the servers it starts inside
its body: ``playguard --help`` loads this module and click only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click

from playguard_async.operator.command_kit import command_settings, echo, fail

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


@click.group()
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
    import tempfile

    from playguard_async.service import daemon
    from playguard_async.service.logs import configure_logging
    from playguard_lab import (
        Lab,
        PostgresServer,
        move_desired_state_to_postgres,
        write_demo_config,
    )

    with contextlib.ExitStack() as stack:
        root = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pg-lab-")))
        running = stack.enter_context(Lab(root / "servers", marquees=marquees))
        config = write_demo_config(running, root / "config", tick_interval=tick)
        if desired_state == "postgres":
            database = stack.enter_context(PostgresServer(root / "servers" / "postgres"))
            move_desired_state_to_postgres(database, config)
        echo(f"lab running in {root}; settings {config}", err=True)
        settings = command_settings(config)
        configure_logging(settings.log_format, settings.log_level, final=True)
        daemon.run(settings, stop_after=duration)


@contextlib.contextmanager
def _lab_errors() -> Iterator[None]:
    """What stops ``lab up``/``down`` (a missing program, a server that would not start, a
    directory or state file it cannot use) as ``Error: ...`` and exit status 1."""
    from playguard_lab import LabCommandFailed, MissingBinary, ServerStartFailed
    from playguard_lab.detached import LabStateError
    from playguard_lab.postgres import ClusterUnreachable

    refused = (
        LabStateError, MissingBinary, ServerStartFailed, LabCommandFailed, ClusterUnreachable
    )  # fmt: skip
    try:
        yield
    except refused as exc:
        fail(str(exc), 1)
    except OSError as exc:
        fail(f"{exc.filename or 'lab'}: {exc.strerror or exc}", 1)


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
    import shlex

    from playguard_lab.detached import default_directory
    from playguard_lab.detached import lab_up as start_lab

    where = directory or default_directory()
    with _lab_errors():
        started = start_lab(
            where, marquees=marquees, tick_interval=tick, postgres=desired_state == "postgres"
        )
    names = [marquee.name for marquee in started.lab.marquees]
    down = "playguard lab down" + ("" if directory is None else f" --dir {shlex.quote(str(where))}")
    pids = ", ".join(server.label for server in started.state.servers)
    echo(f"export PLAYGUARD_CONFIG={shlex.quote(str(started.settings))}")
    echo(
        f"lab up in {where}: Redis {started.lab.redis.url}, Marquees {', '.join(names)}, "
        f"registry {started.lab.registry.address}, git origin {started.lab.git.url}\n"
        f"servers (pid): {pids}\n"
        f"web view (once `playguard run` serves it): {started.web.url}, user "
        f"{started.web.user}, password {started.web.password_file.read_text().strip()} "
        f"(shown once; kept in {started.web.password_file})\n"
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
    from playguard_lab.detached import default_directory
    from playguard_lab.detached import lab_down as stop_lab

    where = directory or default_directory()
    with _lab_errors():
        done = stop_lab(where)
    if not done.found:
        echo(f"no lab is running in {where}; nothing to stop")
        return
    for server in done.gone:
        echo(f"{server.label}: no longer the process `lab up` started; not signalled")
    stopped = ", ".join(server.label for server in done.stopped) or "none"
    echo(f"lab down: stopped {stopped}; removed its state from {where}")
