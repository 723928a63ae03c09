"""The ``playguard`` command: argument parsing and output only."""

from __future__ import annotations

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


def main() -> None:
    cli(prog_name="playguard")


if __name__ == "__main__":
    main()
