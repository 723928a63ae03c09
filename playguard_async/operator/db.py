"""``playguard db migrate | check | triggers | import | export``: the PostgreSQL desired
state's schema and content, all in the one schema playguard owns (``desired_state_schema``).

Every command reaches the database that the ``desired_state`` setting names, with the password
from ``desired_state_password`` (``PLAYGUARD_DESIRED_STATE_PASSWORD``) or
``desired_state_password_file``: never from the command line, where any user could read it.
Errors are one line (exit status 1), the password masked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from playguard_async.operator.options import CONFIG_OPTION

if TYPE_CHECKING:
    import asyncpg

    from playguard_async.settings import Settings

_T = TypeVar("_T")


@click.group()
def db() -> None:
    """The PostgreSQL desired state: schema, import from YAML, export to YAML."""


def run_on_database(
    config: Path | None, work: Callable[[asyncpg.Connection, Settings], Awaitable[_T]]
) -> _T:
    """Run ``work`` on a connection to the settings' database, given the settings (playguard's
    schema is ``desired_state_schema``); one-line errors, exit 1."""
    # Imported here, not at the top: `playguard --help` loads this module (cli's lazy imports).
    from playguard_async.desired_state.model import InventoryError  # noqa: PLC0415
    from playguard_async.desired_state.postgres.connection import (  # noqa: PLC0415
        DatabaseError,
        PgAddress,
        connect,
        redacted,
    )
    from playguard_async.desired_state.registry import source_kind  # noqa: PLC0415
    from playguard_async.settings import SettingsError, load_settings  # noqa: PLC0415

    async def main() -> _T:
        settings = load_settings(config)
        kind = source_kind(settings.desired_state)
        if not kind.database:
            raise SettingsError(
                f"desired_state is {kind.name!r}: set it to postgresql://user@host:port/database "
                "(PLAYGUARD_DESIRED_STATE) for the db commands"
            )
        address = PgAddress.parse(settings.desired_state)
        password = settings.database_password()
        connection = await connect(address, password, timeout=settings.desired_state_timeout)
        try:
            return await work(connection, settings)
        except DatabaseError:
            raise
        except InventoryError:
            raise
        except Exception as exc:
            import asyncpg  # noqa: PLC0415

            if isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError):
                raise DatabaseError(
                    f"{address.describe()}: {redacted(f'{type(exc).__name__}: {exc}', password())}"
                ) from None
            raise
        finally:
            await connection.close()

    try:
        return asyncio.run(main())
    except (SettingsError, InventoryError, DatabaseError) as exc:
        click.echo(f"Error: {exc}", err=True)
        raise click.exceptions.Exit(1) from None


@db.command()
@CONFIG_OPTION
def migrate(config: Path | None) -> None:
    """Apply the schema migrations the database lacks (one transaction; safe to run again)."""
    from playguard_async.desired_state.postgres import schema as migrations  # noqa: PLC0415 - asyncpg

    async def work(connection: asyncpg.Connection, settings: Settings) -> str:
        schema = settings.desired_state_schema
        applied = await migrations.migrate(connection, schema)
        version = await migrations.schema_version(connection, schema)
        if not applied:
            return f"schema {schema} up to date (version {version})"
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied)
        return f"applied {names}; schema {schema} version {version}"

    click.echo(run_on_database(config, work))


@db.command(name="import")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--replace", is_flag=True, help="Replace the database's desired state.")
@CONFIG_OPTION
def import_(file: Path, replace: bool, config: Path | None) -> None:
    """Load the YAML inventory FILE into the database: one transaction, all or nothing."""
    from playguard_async.desired_state.postgres.transfer import import_inventory  # noqa: PLC0415

    async def work(connection: asyncpg.Connection, settings: Settings) -> dict[str, int]:
        # Bounded as the daemon bounds the file: a fleet's inventory past the default is
        # imported with the inventory_max_bytes it is run with.
        return await import_inventory(
            connection,
            file,
            replace=replace,
            schema=settings.desired_state_schema,
            max_bytes=settings.inventory_max_bytes,
            timeout=settings.inventory_read_timeout,
        )

    counts = run_on_database(config, work)
    click.echo("imported " + ", ".join(f"{count} {table}" for table, count in counts.items()))


@db.command()
@click.option(
    "--output", "-o", type=click.Path(path_type=Path, dir_okay=False), default=None,
    help="Write here instead of standard output.",
)  # fmt: skip
@CONFIG_OPTION
def export(output: Path | None, config: Path | None) -> None:
    """Write the database's desired state as a YAML inventory."""
    from playguard_async.desired_state.postgres.transfer import export_inventory  # noqa: PLC0415

    text = run_on_database(config, lambda connection, settings: export_inventory(
        connection, settings.desired_state_schema
    ))  # fmt: skip
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


@db.command()
@CONFIG_OPTION
def check(config: Path | None) -> None:
    """Check the relations playguard reads (tables or views) and their rows: one line per
    problem, exit status 1 when there is any."""
    from playguard_async.desired_state.postgres.db_check import check_mapping  # noqa: PLC0415 - asyncpg

    problems, summary = run_on_database(config, lambda connection, settings: check_mapping(
        connection, settings.desired_state_schema
    ))  # fmt: skip
    for line in problems:
        click.echo(line)
    if problems:
        raise click.exceptions.Exit(1)
    click.echo(summary)


@db.command()
@click.argument("table")
@click.argument("column")
@click.option(
    "--lookup", default=None, metavar="QUERY",
    help="SQL given the COLUMN's old and new values as text[] ($1) that returns the Marquees' "
    "names; without it COLUMN holds the names.",
)  # fmt: skip
@CONFIG_OPTION
def triggers(table: str, column: str, lookup: str | None, config: Path | None) -> None:
    """Print, for review, the trigger that wakes the Marquees a change to TABLE's rows concerns
    (COLUMN identifies a row's Marquee). Nothing is run: the application's owner runs it."""
    from playguard_async.desired_state.postgres.triggers import trigger_statement  # noqa: PLC0415
    from playguard_async.settings import SettingsError, load_settings  # noqa: PLC0415

    try:
        schema = load_settings(config).desired_state_schema
        click.echo(trigger_statement(schema, table, column, lookup))
    except (SettingsError, ValueError) as exc:
        click.echo(f"Error: {exc}", err=True)
        raise click.exceptions.Exit(1) from None
