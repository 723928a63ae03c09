"""``playguard db import`` and ``db export``: a YAML inventory into the database's tables, all
or nothing, and the database's desired state back out as YAML that loads to the same inventory.

Import validates the file with the YAML source itself, so its errors read exactly as the daemon's
(``FILE:LINE: place: reason (value ...)``); what only the database refuses is named by the
file's place too (``marquees[3].host``). The database keeps no order: export lists each table by
name, and local paths are stored absolute (resolved against the file, as the daemon resolves them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from playguard_async.desired_state.model import Inventory, InventoryError
from playguard_async.desired_state.postgres.connection import DEFAULT_SCHEMA, qualified
from playguard_async.desired_state.postgres.mapping import CATALOG_QUERY, present_columns
from playguard_async.desired_state.postgres.relations import (
    STEERING,
    STEERING_DEFAULTS,
    TABLES,
    Table,
)
from playguard_async.desired_state.postgres.snapshot import read_snapshot
from playguard_async.desired_state.postgres.validation import rows_of, validate_snapshot
from playguard_async.desired_state.yaml_source import (
    INVENTORY_MAX_BYTES,
    INVENTORY_READ_TIMEOUT,
    YamlInventorySource,
)


class ImportRefused(InventoryError):
    """The database refused a row of the file; nothing was imported."""


_NOT_TABLES = """
SELECT c.relname::text FROM unnest($2::text[]) AS wanted(name)
LEFT JOIN pg_class c ON c.relname = wanted.name AND c.relnamespace = to_regnamespace($1)
WHERE c.relkind IS DISTINCT FROM 'r'
"""
"""The named relations of a schema that are not plain tables (views, or missing: NULL)."""


async def import_inventory(
    connection: asyncpg.Connection,
    path: Path,
    *,
    replace: bool = False,
    schema: str = DEFAULT_SCHEMA,
    max_bytes: int = INVENTORY_MAX_BYTES,
    timeout: float = INVENTORY_READ_TIMEOUT,
) -> dict[str, int]:
    """Load ``path`` into the tables of ``schema`` in one transaction; rows written per table.

    Without ``replace`` the tables must be empty (an import never merges into a fleet someone
    keeps in the database); with it, their rows are replaced. A relation that is a view (the
    application's rows, mapped) is refused: import writes playguard's own tables only.
    """
    inventory = await YamlInventorySource(path, max_bytes=max_bytes, timeout=timeout).load()
    rows = rows_of(inventory)
    async with connection.transaction():
        tables = await _written(connection, schema, rows)
        names = {table.name: qualified(schema, table.name) for table in tables}
        not_tables = await connection.fetch(_NOT_TABLES, f'"{schema}"', list(names))
        if not_tables:
            raise ImportRefused(
                f"{path}: nothing imported: {schema} holds no table "
                f"{', '.join(sorted(str(row[0]) for row in not_tables if row[0]))}"
                f"{'' if all(row[0] for row in not_tables) else ' (some missing: run db migrate)'}"
                "; db import writes playguard's own tables, not views over the application's"
            )
        await connection.execute("LOCK TABLE " + ", ".join(names.values()) + " IN EXCLUSIVE MODE")
        if replace:
            await connection.execute("TRUNCATE " + ", ".join(reversed(names.values())))
        else:
            for table in tables:
                exists = f"SELECT EXISTS (SELECT 1 FROM {names[table.name]})"
                if await connection.fetchval(exists):
                    raise ImportRefused(
                        f"{path}: table {table.name} is not empty; nothing imported "
                        "(--replace replaces the database's desired state)"
                    )
        catalog = await connection.fetch(CATALOG_QUERY, schema, [t.name for t in tables])
        present = present_columns(catalog)
        for table in tables:
            columns = _writable(path, table, rows[table.name], present.get(table.name, set()))
            kept = [table.columns.index(column) for column in columns]
            table_rows = [tuple(row[index] for index in kept) for row in rows[table.name]]
            await _copy(connection, path, table, table_rows, schema, columns=columns)
    return {table.name: len(rows[table.name]) for table in TABLES}


async def _written(
    connection: asyncpg.Connection, schema: str, rows: Mapping[str, list[tuple[Any, ...]]]
) -> tuple[Table, ...]:
    """The tables an import writes: the five, and ``marquee_steering`` where it exists (from
    migration 0005 on) or where a Marquee of the file needs it (a mode, windows or canary of its
    own; then a schema without it is told to migrate)."""
    steered = any(row[1:] != STEERING_DEFAULTS for row in rows[STEERING.name])
    exists = await connection.fetchval(
        "SELECT to_regclass($1) IS NOT NULL", qualified(schema, STEERING.name)
    )
    return (*TABLES, STEERING) if steered or exists else TABLES


def _writable(
    path: Path, table: Table, rows: list[tuple[Any, ...]], present: set[str]
) -> list[str]:
    """The table's columns to write: all but the optional ones a table of a schema not
    migrated to them lacks, which the file must then leave at their default."""
    columns = []
    for position, column in enumerate(table.columns):
        if column in table.optional and column not in present:
            default = table.model.model_fields[column].default
            for index, row in enumerate(rows):
                if row[position] != default:
                    raise ImportRefused(
                        f"{path}: {table.field}[{index}].{column}: the table has no column "
                        f"{column} (run `playguard db migrate`); nothing imported"
                    )
            continue
        columns.append(column)
    return columns


async def _copy(
    connection: asyncpg.Connection,
    path: Path,
    table: Table,
    rows: list[tuple[Any, ...]],
    schema: str,
    *,
    columns: list[str],
) -> None:
    """COPY the rows in; when the database refuses one, find which and name it."""
    try:
        async with connection.transaction():  # a savepoint, so the search below can run
            await connection.copy_records_to_table(
                table.name, records=rows, columns=columns, schema_name=schema
            )
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as copy_error:
        for index, row in enumerate(rows):
            try:
                async with connection.transaction():
                    await connection.copy_records_to_table(
                        table.name, records=[row], columns=columns, schema_name=schema
                    )
            except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                raise ImportRefused(
                    _refusal(path, table, index, row, exc, columns=columns)
                ) from None
        raise ImportRefused(f"{path}: {table.field}: refused: {copy_error}") from None


def _refusal(
    path: Path,
    table: Table,
    index: int,
    row: tuple[Any, ...],
    exc: Exception,
    *,
    columns: list[str],
) -> str:
    constraint = getattr(exc, "constraint_name", None) or ""
    column = getattr(exc, "column_name", None)
    if column is None:
        match = re.fullmatch(rf"{table.name}_(?P<column>\w+?)_check", constraint)
        column = match["column"] if match and match["column"] in columns else None
    place = f"{table.field}[{index}]" + (f".{column}" if column else "")
    value = f" (value {row[columns.index(column)]!r:.80})" if column else ""
    why = f"constraint {constraint}" if constraint else " ".join(str(exc).split())
    return f"{path}: {place}: refused by the database: {why}{value}; nothing imported"


async def export_inventory(connection: asyncpg.Connection, schema: str = DEFAULT_SCHEMA) -> str:
    """The database's desired state as YAML (read from tables or views alike); InventoryError
    listing every refused row when the snapshot has any (an export that silently dropped rows
    would lose them on re-import)."""
    snapshot = await read_snapshot(connection, schema)
    validated = validate_snapshot(snapshot.rows, broken=snapshot.broken)
    if validated.problems:
        raise InventoryError(*validated.problems)
    return inventory_yaml(validated.inventory)


def inventory_yaml(inventory: Inventory) -> str:
    """YAML for ``inventory``, defaults left out, that the YAML source loads back equal."""
    document = inventory.model_dump(mode="json", exclude_defaults=True)
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
