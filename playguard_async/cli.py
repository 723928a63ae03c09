"""The ``playguard`` command: argument parsing and output only."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import click

from playguard_async import __version__, daemon
from playguard_async.inventory import InventoryError
from playguard_async.observe import configure_logging
from playguard_async.phase import UnknownPhase
from playguard_async.settings import SettingsError, load_settings

CONFIG_OPTION = click.option(
    "--config",
    "config",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="PLAYGUARD_CONFIG",
    default=None,
    help="Settings file (TOML). PLAYGUARD_* environment variables override it.",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="playguard")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Keep a fleet of Docker hosts true to their desired state, one leased reconciler per host."""
    ctx.obj = {"debug": debug}


@cli.command()
@CONFIG_OPTION
@click.option(
    "--dry-run", is_flag=True, default=None, help="Report what would change; change nothing."
)
@click.pass_context
def run(ctx: click.Context, config: Path | None, dry_run: bool | None) -> None:
    """Run the daemon until SIGTERM or SIGINT; exit 0 after a clean drain."""
    overrides = {"dry_run": True} if dry_run else {}
    try:
        settings = load_settings(config, **overrides)
        configure_logging(settings.log_format, settings.log_level)
        daemon.run(settings)
    except (SettingsError, InventoryError, UnknownPhase) as exc:
        if ctx.obj["debug"]:
            raise
        raise click.ClickException(str(exc)) from exc


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
def lab(marquees: int, workdir: Path | None, duration: float | None, tick: float) -> None:
    """Start a lab of real servers on loopback and run the daemon against it.

    Redis, one sshd + dockerd per Marquee, a registry with auth and a git origin; everything
    is stopped on exit. Needs root and the Debian packages that scripts/install.sh installs.
    """
    from playguard_async.lab import Lab, write_demo_config  # noqa: PLC0415 - a tool, not the daemon

    with contextlib.ExitStack() as stack:
        root = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pg-lab-")))
        running = stack.enter_context(Lab(root / "servers", marquees=marquees))
        config = write_demo_config(running, root / "config", tick_interval=tick)
        click.echo(f"lab up in {root}; settings {config}", err=True)
        settings = load_settings(config)
        configure_logging(settings.log_format, settings.log_level)
        daemon.run(settings, stop_after=duration)


def main() -> None:
    cli(prog_name="playguard")


if __name__ == "__main__":
    main()
