"""Reading the desired state from PostgreSQL: one REPEATABLE READ READ ONLY snapshot of every
relation (``read_snapshot``), or of a few Marquees' rows alone (``read_marquees``), bounded in
bytes, each with the change log's version that transaction saw."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import structlog

from playguard_async.cycle_record import UNSEEN_KEPT, DesiredVersion
from playguard_async.desired_state.model import (
    MarqueeListing,
    _collector_paused,
)
from playguard_async.desired_state.postgres.change_log import log_version
from playguard_async.desired_state.postgres.connection import (
    DEFAULT_SCHEMA,
    DatabaseError,
    error_text,
    qualified,
    redacted,
)
from playguard_async.desired_state.postgres.mapping import (
    CATALOG_QUERY,
    check_relations,
    present_columns,
)
from playguard_async.desired_state.postgres.relations import (
    CATALOGUED,
    CHANGE_LOG,
    EXPECTED_COLUMNS,
    KEY_COLUMNS,
    STEERED,
    STEERING,
    STEERING_DEFAULTS,
    TABLES,
    Broken,
    ReadFailed,
    Rows,
    Table,
    view_error,
)
from playguard_async.desired_state.postgres.shares import read_listing

log = structlog.get_logger("playguard.desired_state")


@dataclass(frozen=True)
class Snapshot:
    """One transaction's rows, and the relations among them read by their keys alone."""

    rows: Rows
    broken: Broken = field(default_factory=dict)
    columns: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """The columns read of each relation (those of ``broken`` ones: their keys)."""
    elsewhere: tuple[MarqueeListing, ...] = ()
    """Read for a share: the Marquees outside it, listed (their rows not read)."""
    last_change: DesiredVersion | None = None
    """The change log as the transaction saw it (None: no change log, or empty)."""


class MappingUnreadable(DatabaseError):
    """A relation is wrong so that not even which Marquees its rows concern can be read: the
    snapshot as a whole is refused (the last good one stays in force)."""


class SnapshotTooLarge(Exception):
    """The snapshot's rows are more bytes than the limit: refused before any row is read."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"snapshot of {size} bytes or more (rows as text), more than the limit of {limit} "
            "(inventory_max_bytes): refused unread"
        )


class NarrowReadRefused(Exception):
    """The relations are not as the last whole snapshot found them: only a whole read will do."""


async def read_snapshot(
    connection: asyncpg.Connection,
    schema: str = DEFAULT_SCHEMA,
    *,
    max_bytes: int | None = None,
    share: Callable[[str], bool] | None = None,
) -> Snapshot:
    """Every relation's rows, from one REPEATABLE READ READ ONLY transaction.

    With ``share``, only the rows that concern the Marquees it accepts, as a narrow read
    (``read_marquees``) reads them, but in the same transaction as the listing of every Marquee
    (name, launchable, mode, canary, and the rollout cohorts of its running Playgrounds) that
    tells which those are: one consistent snapshot, of which this replica holds its share's rows
    and a line per other Marquee (``Snapshot.elsewhere``), so that ``Inventory.cohort`` counts
    the whole fleet. A ``marquees`` that is wrong where the listing reads it makes this read a
    whole one.

    With ``max_bytes``, each relation's rows are measured by the server before they are read
    (``Table.size``): ``SnapshotTooLarge`` as soon as the relations so far are more, so an
    oversized snapshot costs the daemon neither the transfer nor the decoding nor validation.

    A relation whose columns are wrong (the catalog says so) or whose read fails (a view's
    expression raising, a division by zero) is read again by its key columns alone, so that the
    rows it lost take out only the Marquees they concern; a read that fails starts the
    transaction over (at most once per relation). ``MappingUnreadable`` when even the keys
    cannot be read.

    The records become dicts after the transaction, with the cyclic collector held off: 60,000
    new dicts at once (none in a cycle) would otherwise start collections that walk everything
    alive, the last snapshot included."""
    failed: dict[str, list[str]] = {}
    replanned = False
    while True:
        try:
            records, broken, steering, columns, elsewhere, last_change = await _read_once(
                connection, schema, failed, max_bytes, share
            )
        except ReadFailed as exc:
            failed[exc.table] = [exc.line]
            continue
        except (asyncpg.InvalidCachedStatementError, asyncpg.OutdatedSchemaCacheError):
            # A relation changed shape (a table replaced by a view, a view redefined) since
            # the connection prepared its read; asyncpg dropped its plans: read once more.
            if replanned:
                raise
            replanned = True
            continue
        with _collector_paused():
            rows = {
                table.name: [dict(record) for record in table_records]
                for table, table_records in zip(TABLES, records, strict=True)
            }
            if "marquees" not in broken:
                _steer(rows["marquees"], steering)
        return Snapshot(rows, broken, columns, elsewhere, last_change)


def _steer(marquees: list[dict[str, Any]], steering: Sequence[asyncpg.Record]) -> None:
    """Give each Marquee row its steering columns, from its ``marquee_steering`` row (JSON text
    for the windows, as asyncpg reads jsonb) or the defaults (those of a column the table
    lacks, too: ``canary`` before 0008)."""
    rows = {row["name"]: row for row in steering}
    for marquee in marquees:
        steered = rows.get(marquee["name"])
        for column, default in zip(STEERED, STEERING_DEFAULTS, strict=True):
            marquee[column] = default if steered is None else steered.get(column, default)


async def _read_once(
    connection: asyncpg.Connection,
    schema: str,
    failed: Mapping[str, list[str]],
    max_bytes: int | None,
    share: Callable[[str], bool] | None,
) -> tuple[
    list[list[asyncpg.Record]],
    dict[str, list[str]],
    list[asyncpg.Record],
    dict[str, list[str]],
    tuple[MarqueeListing, ...],
    DesiredVersion | None,
]:
    async with connection.transaction(isolation="repeatable_read", readonly=True):
        catalog = await connection.fetch(CATALOG_QUERY, schema, [*CATALOGUED, CHANGE_LOG])
        checks = check_relations(schema, EXPECTED_COLUMNS, KEY_COLUMNS, catalog)
        present = present_columns(catalog)
        records, broken = [], {}
        size = 0
        read: dict[str, list[str]] = {}

        async def measure(size_query: str, *args: object) -> None:
            nonlocal size
            if max_bytes is not None:
                size += await connection.fetchval(size_query, *args)
                if size > max_bytes:
                    raise SnapshotTooLarge(size, max_bytes)

        names: list[str] | None = None
        elsewhere: tuple[MarqueeListing, ...] = ()
        if share is not None and not (failed.get("marquees") or "marquees" in checks):
            # A playgrounds relation that is wrong takes every Marquee with Playgrounds out of
            # its owner's snapshot, hence out of every cohort: the others are listed with none.
            cohorts = not (failed.get("playgrounds") or "playgrounds" in checks)
            names, elsewhere = await read_listing(
                connection, schema, present, share, measure, cohorts=cohorts
            )

        async def fetch(table: Table, columns: Sequence[str]) -> list[asyncpg.Record]:
            read[table.name] = list(columns)
            narrow = names is not None
            args = (names,) if narrow else ()
            await measure(table.size(schema, columns, narrow=narrow), *args)
            rows: list[asyncpg.Record] = await connection.fetch(
                table.select(schema, columns, narrow=narrow), *args
            )
            return rows

        for table in TABLES:
            check = checks.get(table.name)
            problems = [*(check.problems if check else ()), *failed.get(table.name, ())]
            if not problems:
                try:
                    columns = table.columns_in(present.get(table.name, set()))
                    records.append(await fetch(table, columns))
                except Exception as exc:
                    if not view_error(exc):
                        raise
                    raise ReadFailed.of(schema, table.name, exc) from None
                continue
            broken[table.name] = problems
            if check is not None and not check.keys_readable:
                raise MappingUnreadable(f"{problems[0]}; which Marquees its rows concern cannot "
                                        "be read: the whole snapshot is refused")  # fmt: skip
            try:
                records.append(await fetch(table, table.keys))
            except Exception as exc:
                if not view_error(exc):
                    raise
                why = redacted(error_text(exc), None)
                raise MappingUnreadable(
                    f"{problems[0]}; its key columns ({', '.join(table.keys)}) cannot be read "
                    f"either ({why}): the whole snapshot is refused"
                ) from None
        steering = await fetch(STEERING, STEERING.columns_in(present.get(STEERING.name, set())))
        last_change = await _last_change(connection, schema, catalog)
    return records, broken, steering, read, elsewhere, last_change


async def read_marquees(
    connection: asyncpg.Connection,
    schema: str,
    names: Sequence[str],
    columns: Mapping[str, Sequence[str]],
    *,
    max_bytes: int | None = None,
) -> tuple[Rows, DesiredVersion | None]:
    """The rows that concern the Marquees ``names`` alone, from one REPEATABLE READ READ ONLY
    transaction: theirs, their steering, their playgrounds and those playgrounds' chats, and the
    playspecs and registries those refer to (``Table.concerning``), read by ``columns`` (a
    whole snapshot's); and the change log's version in that transaction (``_last_change``).
    What is read refers to nothing outside it, so it validates as an inventory of its own: each
    Marquee in it as consistent as in a whole snapshot. Bounded by ``max_bytes`` as a whole read is.

    The catalog is checked as a whole read checks it: ``NarrowReadRefused`` when a relation
    is wrong or its columns are no longer ``columns`` (a view redefined since), so that only a
    whole read, which tells which Marquees it concerns, judges it."""
    async with connection.transaction(isolation="repeatable_read", readonly=True):
        catalog = await connection.fetch(CATALOG_QUERY, schema, [*CATALOGUED, CHANGE_LOG])
        checks = check_relations(schema, EXPECTED_COLUMNS, KEY_COLUMNS, catalog)
        present = present_columns(catalog)
        for table in (*TABLES, STEERING):
            check = checks.get(table.name)
            now = table.columns_in(present.get(table.name, set()))
            if (check is not None and check.problems) or now != list(columns[table.name]):
                raise NarrowReadRefused(f"{qualified(schema, table.name)} changed or is wrong")
        size, records = 0, []
        for table in (*TABLES, STEERING):
            wanted = columns[table.name]
            if max_bytes is not None:
                size += await connection.fetchval(table.size(schema, wanted, narrow=True), names)
                if size > max_bytes:
                    raise SnapshotTooLarge(size, max_bytes)
            records.append(await connection.fetch(table.select(schema, wanted, narrow=True), names))
        last_change = await _last_change(connection, schema, catalog)
    *tables, steering = records
    rows = {
        table.name: [dict(record) for record in table_records]
        for table, table_records in zip(TABLES, tables, strict=True)
    }
    _steer(rows["marquees"], steering)
    return rows, last_change


async def _last_change(
    connection: asyncpg.Connection, schema: str, catalog: Sequence[asyncpg.Record]
) -> DesiredVersion | None:
    """The version of the change log the transaction's snapshot read: its highest id and the
    ids below it not seen (``cycle_record.DesiredVersion``); None without a change log (before
    migration 0009), with an empty one, or one the role may not read (the catalog query says
    so: a refused SELECT would end the snapshot's transaction)."""
    if not any(row["relation"] == CHANGE_LOG and row["readable"] for row in catalog):
        return None
    high, unseen = await log_version(connection, schema, kept=UNSEEN_KEPT)
    if high is None:
        return None
    version: DesiredVersion = {"change": high}
    if unseen:
        version["unseen"] = unseen
    return version
