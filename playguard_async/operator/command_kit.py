"""What every ``playguard`` command shares: its exit statuses, the options many take, the one
way an error a person can fix is shown, and how a command reads its settings (``cli``'s doc says
what each exit status means)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from playguard_async.kits.textclean import clean

if TYPE_CHECKING:
    from playguard_async.settings import Settings

EXIT_LOCKED = 3
EXIT_NOT_OK = 4
EXIT_CONFIG = 78

DRY_RUN_OPTION = click.option(
    "--dry-run", is_flag=True, default=None, help="Report what would change; change nothing."
)
JSON_OPTION = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON with stable keys, for scripts."
)


@contextlib.contextmanager
def readable_errors(ctx: click.Context, *, config_status: int = 1) -> Iterator[None]:
    """Errors a person can fix (settings, inventory, Redis...) as one line, unless ``--debug``;
    a configuration error exits ``config_status``.

    Also quiets the log: the operator commands print for a person, and the engine's own log
    would only repeat it (`run` and `lab` set the log up again from their settings)."""
    from playguard_async.desired_state.model import InventoryError
    from playguard_async.engine.results import CycleCancelled
    from playguard_async.operator.fleet import OperateError
    from playguard_async.phases.protocol import UnknownPhase
    from playguard_async.service.logs import configure_logging
    from playguard_async.settings import SettingsError

    configure_logging("console", "debug" if ctx.obj["debug"] else "critical")
    config_errors = (SettingsError, InventoryError, UnknownPhase)
    try:
        yield
    except (*config_errors, OperateError, CycleCancelled) as exc:
        if isinstance(exc, CycleCancelled):
            status = EXIT_NOT_OK
        else:
            status = config_status if isinstance(exc, config_errors) else 1
        if ctx.obj["debug"]:
            import traceback

            traceback.print_exc()
            raise click.exceptions.Exit(status) from None
        fail(exc.summary() if isinstance(exc, InventoryError) else str(exc), status)


def fail(message: str, exit_code: int) -> NoReturn:
    """End the command with ``message`` on stderr, as click shows its own errors."""
    echo(f"Error: {message}", err=True)
    raise click.exceptions.Exit(exit_code)


def echo(message: str, *, err: bool = False) -> None:
    click.echo(clean(message), err=err)


def dry_run_override(dry_run: bool | None) -> dict[str, bool]:
    """The settings override of ``--dry-run``: only when given, so settings can turn it on too."""
    return {"dry_run": True} if dry_run else {}


def command_settings(config: Path | None, **overrides: bool) -> Settings:
    from playguard_async.settings import load_named_settings

    return load_named_settings(config, **overrides)


def one_scope(marquee: str | None, fleet_wide: bool) -> str | None:
    """MARQUEE, or None with --all: exactly one of them (else exit 1, as any bad value)."""
    if (marquee is None) == (not fleet_wide):
        fail("name one MARQUEE or give --all", 1)
    return marquee


def duration_option(option: str, value: str | None) -> float | None:
    """``option``'s value as seconds (``kits.spans.span_seconds``), None when not given."""
    if value is None:
        return None
    from playguard_async.kits.spans import span_seconds

    try:
        return span_seconds(value)
    except ValueError as exc:
        fail(f"{option} {exc}", 1)
