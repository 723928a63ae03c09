"""Options that more than one command group takes: ``cli`` and ``db_cli`` both read the settings
file, and neither may import the other's module (``cli`` loads ``db_cli`` to add its group)."""

from __future__ import annotations

from pathlib import Path

import click

CONFIG_OPTION = click.option(
    "--config",
    "config",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="PLAYGUARD_CONFIG",
    default=None,
    help="Settings file (TOML). PLAYGUARD_* environment variables override it.",
)
