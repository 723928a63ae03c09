"""The desired state from PostgreSQL: each ``load`` reads one consistent snapshot (one REPEATABLE
READ READ ONLY transaction) and validates every row with the inventory's own models.

The database's CHECK constraints mirror the models, but another tool may have written around
them (constraints dropped, a restore from elsewhere): every row is validated again. A refused row
takes out only the Marquees whose desired state it is part of (a playground's Marquee, every
Marquee using a playspec or registry), since a cycle that saw a Marquee without one of its
playgrounds would remove that playground from the host; the rest of the fleet reconciles. Each
refusal names table, key, column and value, and is logged when the set of refusals changes.

The database unreachable: ``load`` returns the last good snapshot, logs once when reachability
changes, and ``reachable`` says so for /readyz and the metrics; the next tick tries again. With
no snapshot yet (out of reach since start) it raises ``DesiredStateUnavailable``, which the engine
waits out (no cycles, /readyz not ready) rather than treating as a configuration error.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, get_args

import asyncpg
import structlog
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from playguard_async.cycle_record import UNSEEN_KEPT, CycleRecord, DesiredVersion
from playguard_async.desired_state.model import (
    REFERENCES,
    AgentChat,
    DesiredStateUnavailable,
    Inventory,
    InventoryError,
    Marquee,
    MarqueeListing,
    Mode,
    Playground,
    Playspec,
    Registry,
    _collector_paused,
    _reason,
    _shown_value,
)
from playguard_async.desired_state.postgres.audit_checkpoint import CheckpointWriter
from playguard_async.desired_state.postgres.connection import (
    DEFAULT_SCHEMA,
    DatabaseError,
    PasswordSource,
    PgAddress,
    connect,
    error_text,
    qualified,
    redacted,
)
from playguard_async.desired_state.postgres.mapping import (
    CATALOG_QUERY,
    check_relations,
    expected_columns,
    present_columns,
)
from playguard_async.desired_state.postgres.observed_state import ObservedStateWriter
from playguard_async.desired_state.rollout_policy import RolloutPolicy
from playguard_async.desired_state.source import Ability
from playguard_async.desired_state.windows import Window
from playguard_async.desired_state.yaml_source import INVENTORY_MAX_BYTES
from playguard_async.kits.aio import in_thread

log = structlog.get_logger("playguard.desired_state")


@dataclass(frozen=True)
class Table:
    """One list of the inventory and the relation holding it; columns are the model's fields."""

    name: str
    field: str
    model: type[BaseModel]
    keys: tuple[str, ...]
    """The columns that say which Marquees a row concerns: its name and its references."""
    optional: tuple[str, ...] = ()
    """Columns a relation may lack, read as the model's default (fields added after 0004)."""
    elsewhere: tuple[str, ...] = ()
    """Fields of the model kept in a table of playguard's own, not in this relation (which may
    be the application's view): a Marquee's steering (``STEERING``)."""
    concerning: str = "name = ANY($1::text[])"
    """The condition of the rows that concern the Marquees named in ``$1`` (a narrow read):
    ``{name}`` is a relation's qualified name."""

    def columns_in(self, present: set[str]) -> list[str]:
        """The columns to read of a relation that has ``present``: an optional one it lacks
        is read as the model's default."""
        return [c for c in self.columns if c not in self.optional or c in present]

    @property
    def columns(self) -> list[str]:
        return [name for name in self.model.model_fields if name not in self.elsewhere]

    @property
    def has_arrays(self) -> bool:
        """Whether a column holds a list (an array, unhashable as read)."""
        return any(
            getattr(info.annotation, "__origin__", None) is list
            for name, info in self.model.model_fields.items()
            if name not in self.elsewhere
        )

    def select(
        self, schema: str, columns: Sequence[str] | None = None, *, narrow: bool = False
    ) -> str:
        """Every row, or with ``narrow`` those concerning the Marquees named in ``$1``."""
        quoted = ", ".join(f'"{column}"' for column in columns or self.columns)
        return f"SELECT {quoted} FROM {self._rows(schema, narrow)} ORDER BY name"

    def size(self, schema: str, columns: Sequence[str], *, narrow: bool = False) -> str:
        """The bytes ``select`` of ``columns`` would give, as text: what the server measures
        before a row is sent (compressed values counted as they arrive, decompressed)."""
        quoted = ", ".join(f'"{column}"' for column in columns)
        return _measured(f"SELECT {quoted} FROM {self._rows(schema, narrow)}")

    def _rows(self, schema: str, narrow: bool) -> str:
        relation = qualified(schema, self.name)
        if not narrow:
            return relation
        names = {table.name: qualified(schema, table.name) for table in (*TABLES, STEERING)}
        return f"{relation} WHERE {self.concerning.format(**names)}"


class MarqueeSteering(BaseModel):
    """A Marquee's row of ``marquee_steering`` (migration 0005; ``canary`` from 0008): its mode,
    windows and whether it is a canary of rollouts, kept in playguard's own table so that
    ``marquees`` may stay the application's view, which no migration alters. A Marquee without
    a row is steered by default (``apply``, the fleet's windows, no canary)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    mode: Mode = "apply"
    windows: list[Window] | None = None
    canary: bool = False


STEERED = ("mode", "windows", "canary")
"""The Marquee fields ``marquee_steering`` holds."""

STEERING = Table("marquee_steering", "marquees", MarqueeSteering, ("name",), ("canary",))
"""Its ``canary`` optional: a replica of this release reads a schema not yet migrated to 0008."""

STEERING_DEFAULTS = tuple(MarqueeSteering.model_fields[column].default for column in STEERED)

_PLAYGROUNDS_OF = "SELECT name FROM {playgrounds} WHERE marquee = ANY($1::text[])"
_PLAYSPECS_OF = "SELECT playspec FROM {playgrounds} WHERE marquee = ANY($1::text[])"
_REGISTRIES_OF = f"SELECT registry FROM {{playspecs}} WHERE name IN ({_PLAYSPECS_OF})"

TABLES = (
    Table("marquees", "marquees", Marquee, ("name",), elsewhere=STEERED),
    Table("registries", "registries", Registry, ("name",),
          concerning=f"name IN ({_REGISTRIES_OF})"),
    Table("playspecs", "playspecs", Playspec, ("name", "registry"),
          ("rollback", "health_timeout", "rollout"), concerning=f"name IN ({_PLAYSPECS_OF})"),
    Table("playgrounds", "playgrounds", Playground, ("name", "playspec", "marquee"),
          concerning="marquee = ANY($1::text[])"),
    Table("agent_chats", "agent_chats", AgentChat, ("name", "playground"),
          concerning=f"playground IN ({_PLAYGROUNDS_OF})"),
)  # fmt: skip
"""In reference order: a relation only refers to relations before it."""

EXPECTED_COLUMNS = {
    table.name: {
        column: kind
        for column, kind in expected_columns(table.model, table.optional).items()
        if column in table.columns
    }
    for table in TABLES
}
KEY_COLUMNS = {table.name: table.keys for table in TABLES}
CHANGE_LOG = "changes"
"""Migration 0009's change log: a whole read notes its highest id, the version of the desired
state each cycle names (one index lookup in the snapshot's transaction; the catalog query that
opens it says whether the log is there)."""

CATALOGUED = [table.name for table in (*TABLES, STEERING)]
"""The relations whose columns each read asks the catalog for (``marquee_steering``'s only to
know which optional ones it has)."""

Rows = dict[str, list[dict[str, Any]]]
"""A snapshot as read: table name -> rows as column -> value, in name order."""

Broken = Mapping[str, Sequence[str]]
"""Relations that could not be read whole -> why, one line per problem; their rows in the
snapshot hold the key columns only."""


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


class _ReadFailed(Exception):
    def __init__(self, table: str, line: str) -> None:
        super().__init__(line)
        self.table, self.line = table, line

    @classmethod
    def of(cls, schema: str, table: str, exc: BaseException) -> _ReadFailed:
        """A relation whose view raised ``exc`` when read."""
        why = redacted(error_text(exc), None)
        return cls(table, f"{schema}.{table}: cannot be read: {why}")


_VIEW_ERROR_CLASSES = frozenset({"21", "22", "23", "2F", "38", "39", "42", "0A", "P0"})
"""SQLSTATE classes a view's own definition raises when read (cardinality, data exception,
constraint, routine exceptions, access rule or privilege, unsupported feature, PL/pgSQL RAISE);
others (connection, shutdown, resources) are the database's state, retried as an outage."""


def _view_error(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.InvalidCachedStatementError | asyncpg.OutdatedSchemaCacheError):
        return False  # our prepared plan is stale, not the view wrong: ``read_snapshot`` retries
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, asyncpg.PostgresError) and sqlstate[:2] in _VIEW_ERROR_CLASSES


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
        except _ReadFailed as exc:
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


_MODES = frozenset(get_args(Mode))


def _listing(schema: str, present: Mapping[str, set[str]]) -> str:
    """Every Marquee's name, launchable, mode and canary (its steering row's, else the
    defaults)."""
    marquees, steering = qualified(schema, "marquees"), qualified(schema, STEERING.name)
    canary = "s.canary" if "canary" in present.get(STEERING.name, set()) else "NULL::boolean"
    return (
        f"SELECT m.name, m.launchable, coalesce(s.mode, 'apply') AS mode, "
        f"coalesce({canary}, false) AS canary FROM {marquees} m "
        f"LEFT JOIN {steering} s ON s.name = m.name"
    )


def _cohorts(schema: str) -> str:
    """Each Marquee with running Playgrounds, and their (playspec, branch) pairs as two arrays
    of one order (two aggregates of one group take its rows in the same order): what
    ``Inventory.cohort`` needs of a Marquee held elsewhere. Repeated pairs are left to
    ``_cohorts_by_marquee``: a DISTINCT here, or an order within each array, tripled the
    query's cost (bench/README.md, "Cohorts in a share's listing")."""
    playgrounds = qualified(schema, "playgrounds")
    return (
        "SELECT marquee, array_agg(playspec) AS playspecs, array_agg(branch) AS branches "
        f"FROM {playgrounds} WHERE state = 'running' GROUP BY marquee"
    )


def _measured(query: str) -> str:
    """The bytes ``query``'s rows are as text, as the server measures them before sending."""
    return f"SELECT coalesce(sum(octet_length(rows::text)), 0)::bigint FROM ({query}) AS rows"


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
            names, elsewhere = await _read_listing(
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
                    if not _view_error(exc):
                        raise
                    raise _ReadFailed.of(schema, table.name, exc) from None
                continue
            broken[table.name] = problems
            if check is not None and not check.keys_readable:
                raise MappingUnreadable(f"{problems[0]}; which Marquees its rows concern cannot "
                                        "be read: the whole snapshot is refused")  # fmt: skip
            try:
                records.append(await fetch(table, table.keys))
            except Exception as exc:
                if not _view_error(exc):
                    raise
                why = redacted(error_text(exc), None)
                raise MappingUnreadable(
                    f"{problems[0]}; its key columns ({', '.join(table.keys)}) cannot be read "
                    f"either ({why}): the whole snapshot is refused"
                ) from None
        steering = await fetch(STEERING, STEERING.columns_in(present.get(STEERING.name, set())))
        last_change = await _last_change(connection, schema, catalog)
    return records, broken, steering, read, elsewhere, last_change


async def _read_listing(
    connection: asyncpg.Connection,
    schema: str,
    present: Mapping[str, set[str]],
    share: Callable[[str], bool],
    measure: Callable[[str], Awaitable[None]],
    *,
    cohorts: bool,
) -> tuple[list[str], tuple[MarqueeListing, ...]]:
    """The names of the share's Marquees and the others listed (``_split``), with their cohorts
    unless ``cohorts`` is False, each query measured before it is read. A view that raises,
    measured or read, is a failed read of the relation it reads, as a whole read's would be:
    ``marquees`` read again without a share, its keys alone; ``playgrounds`` read again by its
    keys, the others listed without cohorts."""

    async def fetched(query: str, relation: str) -> list[asyncpg.Record]:
        try:
            await measure(_measured(query))
            rows: list[asyncpg.Record] = await connection.fetch(query)
        except Exception as exc:
            if not _view_error(exc):
                raise
            raise _ReadFailed.of(schema, relation, exc) from None
        return rows

    listing = await fetched(_listing(schema, present), "marquees")
    running = await fetched(_cohorts(schema), "playgrounds") if cohorts else []
    return _split(listing, _cohorts_by_marquee(running), share)


Scopes = tuple[tuple[str, str], ...]


def _cohorts_by_marquee(rows: Sequence[asyncpg.Record]) -> dict[str, Scopes]:
    """Marquee -> the (playspec, branch) of its running Playgrounds, from ``_cohorts``'s rows,
    each pair once, in order. A row with anything but text in them (a view's garbage) gives its
    Marquee none: the replica whose share it is leaves that Marquee out of its snapshot, so out
    of every cohort too. Rows alike (most Marquees run the same Playspecs on the same branches)
    are worked out once and share one tuple: this runs on the event loop, for every Marquee of
    the fleet, at every tick."""
    found: dict[str, Scopes] = {}
    known: dict[tuple[tuple[object, ...], tuple[object, ...]], Scopes | None] = {}
    interned: dict[Scopes, Scopes] = {}
    for marquee, playspecs, branches in rows:
        if not (isinstance(marquee, str) and isinstance(playspecs, list)
                and isinstance(branches, list)):  # fmt: skip
            continue
        key = (tuple(playspecs), tuple(branches))
        if key not in known:
            scopes = _scopes(*key)
            known[key] = None if scopes is None else interned.setdefault(scopes, scopes)
        scopes = known[key]
        if scopes is not None:
            found[marquee] = scopes
    return found


def _scopes(playspecs: tuple[object, ...], branches: tuple[object, ...]) -> Scopes | None:
    """The pairs of one ``_cohorts`` row, or None when they are not all text."""
    if len(playspecs) != len(branches):
        return None
    pairs: set[tuple[str, str]] = set()
    for playspec, branch in zip(playspecs, branches, strict=True):
        if not (isinstance(playspec, str) and isinstance(branch, str)):
            return None
        pairs.add((playspec, branch))
    return tuple(sorted(pairs))


def _split(
    listing: Sequence[asyncpg.Record],
    cohorts: Mapping[str, Scopes],
    share: Callable[[str], bool],
) -> tuple[list[str], tuple[MarqueeListing, ...]]:
    """The names ``share`` accepts, and the others listed with their cohorts (those of a Marquee
    whose cycles may change its Playgrounds: launchable, ``apply`` mode, as
    ``Inventory.listed`` has them). A listing row that is not a name, a boolean, a mode and a
    boolean (a view's garbage) is in neither: a replica whose share it is reports it when it
    reads the row whole."""
    names, elsewhere = [], []
    for name, launchable, mode, canary in listing:
        if (
            not isinstance(name, str)
            or not isinstance(launchable, bool)
            or mode not in _MODES
            or not isinstance(canary, bool)
        ):
            continue
        if share(name):
            names.append(name)
        else:
            scopes = cohorts.get(name, ()) if launchable and mode == "apply" else ()
            elsewhere.append(MarqueeListing(name, launchable, mode, canary, scopes))
    return names, tuple(elsewhere)


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


_LAST_CHANGE = """
SELECT high, ARRAY(
    SELECT g FROM generate_series(
        greatest(high - $1, (SELECT min(id) FROM {changes} WHERE id > high - $1)), high - 1) AS g
    WHERE NOT EXISTS (SELECT FROM {changes} WHERE id = g)
    ORDER BY g DESC LIMIT $2) AS unseen
FROM (SELECT max(id) AS high FROM {changes}) AS top
"""
"""The highest id the snapshot sees, and the ids below it (among the ``$1`` before it, above
the lowest one kept: a prune's cut is no gap) it does not: a transaction that took its id
before the highest's and had not committed (or rolled back). Ids are taken under a chain's
lock, so one chain's rise with their commits; two chains' need not. ``$1`` index probes."""

UNSEEN_WINDOW = 1000
"""Ids below the highest that each read looks through for unseen ones."""


async def _last_change(
    connection: asyncpg.Connection, schema: str, catalog: Sequence[asyncpg.Record]
) -> DesiredVersion | None:
    """The version of the change log the transaction's snapshot read: its highest id and the
    ids below it not seen (``cycle_record.DesiredVersion``); None without a change log (before
    migration 0009), with an empty one, or one the role may not read (the catalog query says
    so: a refused SELECT would end the snapshot's transaction)."""
    if not any(row["relation"] == CHANGE_LOG and row["readable"] for row in catalog):
        return None
    row = await connection.fetchrow(
        _LAST_CHANGE.format(changes=qualified(schema, CHANGE_LOG)), UNSEEN_WINDOW, UNSEEN_KEPT
    )
    if row is None or row["high"] is None:
        return None
    version: DesiredVersion = {"change": row["high"]}
    if row["unseen"]:
        version["unseen"] = sorted(row["unseen"])
    return version


@dataclass
class Validated:
    """A snapshot's inventory and why some rows (and what depends on them) were left out."""

    inventory: Inventory
    problems: list[str] = field(default_factory=list)


_ADAPTERS: dict[str, TypeAdapter[list[Any]]] = {
    table.name: TypeAdapter(list[table.model])  # type: ignore[name-defined]
    for table in TABLES
}
"""One validator per table, built once: building one costs more than validating a small table."""

RowKey = tuple[Any, ...]

_NAME_KEY = itemgetter("name")
_NAME_OF = attrgetter("name")


def _row_key(row: dict[str, Any]) -> RowKey:
    """A row's values, hashable (arrays as tuples): equal keys validate to equal models."""
    return tuple(tuple(value) if isinstance(value, list) else value for value in row.values())


def _row_keys(table: Table, rows: list[dict[str, Any]]) -> tuple[RowKey, ...]:
    if table.has_arrays:
        return tuple(_row_key(row) for row in rows)
    return tuple(tuple(row.values()) for row in rows)  # the common tables: at C speed


@dataclass
class RowMemo:
    """The models of the last snapshot's valid rows, by row: a tick whose rows did not change
    (the common case) validates nothing again, and one row changed validates that row only.
    Holds the last snapshot's rows only, so it never outgrows the fleet."""

    models: dict[str, dict[RowKey, Any]] = field(default_factory=dict)
    keys: tuple[tuple[RowKey, ...], ...] | None = None
    broken: tuple[tuple[str, tuple[str, ...]], ...] = ()
    validated: Validated | None = None


def _valid_rows(
    table: Table,
    rows: list[dict[str, Any]],
    keys: tuple[RowKey, ...],
    known: dict[RowKey, Any],
    problems: list[str],
) -> dict[RowKey, Any]:
    """The table's valid rows as models by row key, in row order; each refused row is a
    problem line and is left out. Rows ``known`` from the last snapshot are not validated again."""
    adapter = _ADAPTERS[table.name]
    fresh = [index for index, key in enumerate(keys) if key not in known]
    refused: dict[int, list[str]] = {}
    try:
        models = adapter.validate_python([rows[index] for index in fresh])
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            position, column = error["loc"][0], ".".join(str(part) for part in error["loc"][1:])
            assert isinstance(position, int)
            index = fresh[position]
            refused.setdefault(index, []).append(
                f"{table.name} {rows[index].get('name')!r}: column {column or '(row)'}: "
                f"{_reason(error)}{_shown_value(error)}"
            )
        for lines in refused.values():
            problems.extend(lines)
        fresh = [index for index in fresh if index not in refused]
        models = adapter.validate_python([rows[index] for index in fresh])
    validated = dict(zip((keys[index] for index in fresh), models, strict=True))
    return {
        key: known[key] if key in known else validated[key]
        for index, key in enumerate(keys)
        if index not in refused
    }


def validate_snapshot(
    rows: Rows, memo: RowMemo | None = None, broken: Broken | None = None
) -> Validated:
    """The inventory of the rows the models accept, without the Marquees a refused row concerns.

    A relation in ``broken`` (read by its keys alone) has all its rows refused, its problem
    lines reported. Over views nothing keeps names unique or references resolved: a name on
    several rows (a join gone wrong) refuses all of them, and a reference to a name that no row
    has refuses the referring row, each with its Marquees, the rest of the fleet untouched.

    With ``memo`` (kept by the caller across snapshots) unchanged rows are not validated again,
    and an unchanged snapshot returns the last result itself, its inventory's index built. The
    cyclic collector is held off meanwhile, as for the YAML file: the models and the index are
    hundreds of thousands of objects, none in a cycle, and the collections their allocation
    starts walked everything alive (bench/README.md: the collector in a cold snapshot)."""
    with _collector_paused():
        return _validate_snapshot(rows, memo, broken or {})


def _validate_snapshot(rows: Rows, memo: RowMemo | None, broken: Broken) -> Validated:
    memo = memo if memo is not None else RowMemo()
    keys = tuple(_row_keys(table, rows[table.name]) for table in TABLES)
    shape = tuple(sorted((name, tuple(lines)) for name, lines in broken.items()))
    if memo.validated is not None and keys == memo.keys and shape == memo.broken:
        return memo.validated
    problems: list[str] = []
    by_key: dict[str, dict[RowKey, Any]] = {}
    present = {table.name: set(map(_NAME_KEY, rows[table.name])) for table in TABLES}
    for table, table_keys in zip(TABLES, keys, strict=True):
        if table.name in broken:
            problems.extend(broken[table.name])
            by_key[table.name] = {}
            continue
        table_rows, row_keys = rows[table.name], table_keys
        kept = _unique_names(table, table_rows, present[table.name], problems)
        if kept is not None:
            table_rows, row_keys = [table_rows[i] for i in kept], tuple(row_keys[i] for i in kept)
        by_key[table.name] = _valid_rows(
            table, table_rows, row_keys, memo.models.get(table.name, {}), problems
        )
    valid = {name: list(models.values()) for name, models in by_key.items()}
    names = {table: set(map(_NAME_OF, valid[table])) for table in valid}
    # Which Marquees each refused row concerns, read from the raw values (a refused row's
    # columns are still strings to compare, whatever else is wrong with them).
    bad_registries = present["registries"] - names["registries"]
    bad_playspecs = present["playspecs"] - names["playspecs"]
    bad_playspecs |= {
        row["name"] for row in rows["playspecs"] if row.get("registry") in bad_registries
    }
    problems.extend(_dangling_references(valid, present))
    bad_playspecs |= {
        spec.name
        for spec in valid["playspecs"]
        if spec.registry is not None and spec.registry not in present["registries"]
    }
    bad_playgrounds = present["playgrounds"] - names["playgrounds"]
    bad_chat_playgrounds = {
        row.get("playground")
        for row in rows["agent_chats"]
        if row["name"] not in names["agent_chats"]
    }
    excluded = present["marquees"] - names["marquees"]
    for row in rows["playgrounds"]:
        if (
            row["name"] in bad_playgrounds
            or row.get("playspec") in bad_playspecs
            or row.get("playspec") not in present["playspecs"]
            or row["name"] in bad_chat_playgrounds
        ):
            excluded.add(row.get("marquee"))
    for marquee in sorted(name for name in excluded if name in names["marquees"]):
        problems.append(f"marquees {marquee!r}: left out of this snapshot (a row it needs is bad)")
    kept_marquees = names["marquees"] - excluded
    kept_playspecs = names["playspecs"] - bad_playspecs
    playgrounds = [
        playground
        for playground in valid["playgrounds"]
        if playground.marquee in kept_marquees and playground.playspec in kept_playspecs
    ]
    kept_playgrounds = {playground.name for playground in playgrounds}
    inventory = Inventory(
        marquees=[m for m in valid["marquees"] if m.name in kept_marquees],
        registries=valid["registries"],
        playspecs=[spec for spec in valid["playspecs"] if spec.name in kept_playspecs],
        playgrounds=playgrounds,
        agent_chats=[chat for chat in valid["agent_chats"] if chat.playground in kept_playgrounds],
    )
    inventory._index  # noqa: B018 - built here, in the validating thread, not on the loop
    memo.models, memo.keys, memo.broken = by_key, keys, shape
    memo.validated = Validated(inventory, problems)
    return memo.validated


def _unique_names(
    table: Table, rows: list[dict[str, Any]], present: set[Any], problems: list[str]
) -> list[int] | None:
    """The positions of the rows whose name no other row has, or None when every name is
    unique (the common case, told by the ``present`` names alone: tables have primary keys).
    A view with a bad join repeats a row; which copy is right cannot be told, so all of them
    are refused."""
    if len(present) == len(rows):
        return None
    counts = Counter(map(_NAME_KEY, rows))
    repeated = {name for name, count in counts.items() if count > 1 and name is not None}
    for name in sorted(repeated):
        problems.append(f"{table.name} {name!r}: {counts[name]} rows have this name (a join in "
                        "the view repeats it?); all of them left out")  # fmt: skip
    return [index for index, row in enumerate(rows) if row["name"] not in repeated]


def _dangling_references(valid: Mapping[str, list[Any]], present: Mapping[str, set[Any]]
                         ) -> Iterator[str]:  # fmt: skip
    """A line per valid row naming a row that no relation has (tables' foreign keys prevent it;
    views do not)."""
    for source, column, target in REFERENCES:
        references = set(map(attrgetter(column), valid[source]))
        references.discard(None)
        if references <= present[target]:
            continue  # every reference resolves, the common case, found at C speed
        for item in valid[source]:
            reference = getattr(item, column)
            if reference is not None and reference not in present[target]:
                yield (f"{source} {item.name!r}: column {column}: no row of {target} has the "
                       f"name {reference!r}; left out")  # fmt: skip


def rows_of(inventory: Inventory) -> dict[str, list[tuple[Any, ...]]]:
    """The inventory as rows per table, in each table's column order (paths as text, windows
    as JSON text), ``marquee_steering`` included: one row per Marquee, in the same order."""
    return {
        table.name: [
            tuple(_column_value(column, getattr(item, column)) for column in table.columns)
            for item in getattr(inventory, table.field)
        ]
        for table in (*TABLES, STEERING)
    }


_JSON_COLUMNS: dict[str, TypeAdapter[Any]] = {
    "windows": TypeAdapter(list[Window]),
    "rollout": TypeAdapter(RolloutPolicy),
}
"""The jsonb columns (``mapping.JSON``) and how their values are written."""


def _column_value(column: str, value: object) -> object:
    """A model's value as its column takes it: a path as text, a Marquee's windows and a
    Playspec's rollout as JSON text for their jsonb columns (as asyncpg writes jsonb)."""
    if isinstance(value, Path):
        return str(value)
    adapter = _JSON_COLUMNS.get(column)
    if adapter is not None and value is not None:
        return adapter.dump_json(value).decode()
    return value


SNAPSHOT_TIMEOUT = 10.0
"""Default seconds connecting and reading one snapshot may take."""

NARROW_READ_MAX = 100
"""Most Marquees one narrow read serves: past it (a playspec many use changed) the whole
snapshot costs about as much, is validated off the loop, and refreshes everyone's state."""
LISTENER_PROBE_INTERVAL = 30.0
"""Seconds between the probes that ask the LISTEN connection whether it still answers
(``desired_state_probe_interval``)."""


class PostgresDesiredState:
    """A ``DesiredState`` that reads PostgreSQL; keeps one connection between ticks."""

    abilities = frozenset({Ability.REMOTE, Ability.NARROW})

    def __init__(
        self,
        address: PgAddress,
        password: PasswordSource,
        *,
        timeout: float = SNAPSHOT_TIMEOUT,
        validate_timeout: float = 30.0,
        max_bytes: int = INVENTORY_MAX_BYTES,
        observed: ObservedStateWriter | None = None,
        schema: str = DEFAULT_SCHEMA,
        probe_interval: float = LISTENER_PROBE_INTERVAL,
        checkpoints: CheckpointWriter | None = None,
    ) -> None:
        self.address = address
        self.schema = schema
        self._checkpoints = checkpoints
        self._observed = observed
        self._probe_interval = probe_interval
        self._password = password
        self._timeout = timeout
        self._validate_timeout = validate_timeout
        self._max_bytes = max_bytes
        self._connection: asyncpg.Connection | None = None
        self._last: Inventory | None = None
        self._problems: Sequence[str] = ()
        self._memo = RowMemo()
        self._share: Callable[[str], bool] | None = None
        self._columns: Mapping[str, Sequence[str]] | None = None
        """The columns of the last whole snapshot, when every relation was read whole: what a
        narrow read (``load_marquees``) reads; None: narrow reads wait for such a snapshot."""
        self._loading = asyncio.Lock()  # a tick and a wake-up share the one connection
        self._validating = threading.Lock()
        """Held by the validating thread until it ends, past its timeout too: one at a time."""
        self._validation_late = False
        self.reachable: bool | None = None
        """None before the first read; then whether the last read reached the database."""
        self.last_error: str | None = None
        self.last_snapshot_at: float | None = None
        """``time.monotonic()`` of the last good snapshot."""

    def describe(self) -> str:
        return self.address.describe()

    async def load(self) -> Inventory:
        async with self._loading:
            return await self._load()

    async def _load(self) -> Inventory:
        if self._validating.locked():  # an abandoned validation still runs: start no other
            log.debug("desired_state.still_validating", source=self.describe())
            return self._late(f"a snapshot read earlier is still being validated, past "
                              f"{self._validate_timeout:g} s (inventory_read_timeout)")  # fmt: skip
        try:
            snapshot = await asyncio.wait_for(self._read(), self._timeout)
        except SnapshotTooLarge as exc:
            # The database answered: a bad desired state (the engine keeps the last good one and
            # says so once), or, with none yet, one to wait out like an outage.
            self._now_reachable()
            refused = f"{self.describe()}: {exc}"
            raise (DesiredStateUnavailable if self._last is None else InventoryError)(
                refused
            ) from None
        except (DatabaseError, OSError, TimeoutError, asyncpg.PostgresError,
                asyncpg.InterfaceError) as exc:  # fmt: skip
            await self._drop_connection()
            self._unreachable(self._why(exc))
            if self._last is None:  # not a configuration error: the engine waits and retries
                raise DesiredStateUnavailable(f"{self.describe()}: {self.last_error}") from None
            return self._last
        self._now_reachable()
        try:
            validated = await self._validate(snapshot)
        except TimeoutError:
            return self._late(
                f"snapshot not validated within {self._validate_timeout:g} s "
                "(inventory_read_timeout)"
            )
        if self._validation_late:
            log.info("desired_state.validation_caught_up", source=self.describe())
            self._validation_late = False
        if list(self._problems) != validated.problems:
            for problem in validated.problems:
                log.error("desired_state.row_refused", source=self.describe(), error=problem)
            if not validated.problems:
                log.info("desired_state.rows_all_valid", source=self.describe())
            self._problems = validated.problems
        # The listing of other shares is no part of the rows the memo compares: an unchanged
        # share with a changed listing gives the same inventory, listing the others anew.
        validated.inventory._elsewhere = snapshot.elsewhere
        validated.inventory._version = snapshot.last_change
        self._last = validated.inventory
        self._columns = None if snapshot.broken else snapshot.columns
        self.last_snapshot_at = time.monotonic()
        return validated.inventory

    def set_share(self, owns: Callable[[str], bool] | None) -> None:
        if owns != self._share:
            # A fresh memo: the next read validates the new share's rows anew rather than keep
            # models of the last read (a whole one, say), which would pin its memory.
            self._memo = RowMemo()
        self._share = owns

    async def load_marquees(self, names: Collection[str]) -> Inventory | None:
        """An inventory of the Marquees ``names`` alone (those whose rows are valid), from a
        narrow read (``read_marquees``): what a wake-up needs, at the cost of their rows, not of
        the fleet's (bench/README.md: change-to-host latency). None when only a whole snapshot
        will do: none read yet, or its relations not all whole; more names than
        ``NARROW_READ_MAX``; the read failed or was refused. The caller then reads it whole.

        Its rows are validated on the loop (a few Marquees' worth: the bound keeps it so), by the
        whole snapshot's memo without changing it; ``load`` goes on serving whole snapshots."""
        if not names or len(names) > NARROW_READ_MAX:
            return None
        async with self._loading:
            if self._columns is None or self._validating.locked():
                return None
            try:
                rows, last_change = await asyncio.wait_for(
                    self._read_narrow(sorted(names)), self._timeout
                )
            except (SnapshotTooLarge, NarrowReadRefused, DatabaseError, OSError, TimeoutError,
                    asyncpg.PostgresError, asyncpg.InterfaceError) as exc:  # fmt: skip
                await self._drop_connection()  # a transaction cut short: start clean
                log.info("desired_state.narrow_read_failed", source=self.describe(),
                         error=redacted(f"{type(exc).__name__}: {exc}", None)[:300])  # fmt: skip
                return None
            inventory = validate_snapshot(rows, RowMemo(models=self._memo.models)).inventory
            inventory._version = last_change
            return inventory

    async def _read_narrow(self, names: Sequence[str]) -> tuple[Rows, DesiredVersion | None]:
        assert self._columns is not None
        if self._connection is None or self._connection.is_closed():
            self._connection = await connect(self.address, self._password, timeout=self._timeout)
        return await read_marquees(
            self._connection, self.schema, names, self._columns, max_bytes=self._max_bytes
        )

    async def _validate(self, snapshot: Snapshot) -> Validated:
        """``validate_snapshot`` in a thread, bounded by the validation timeout. A thread past it
        is abandoned (it cannot be stopped) but keeps ``_validating`` until it ends, so the loads
        meanwhile start no other: threads never pile up, and the memo has one writer."""
        if not self._validating.acquire(blocking=False):
            raise TimeoutError  # not reached: ``_load`` checked it on this loop
        ran = False

        def validate_and_unlock() -> Validated:
            nonlocal ran
            ran = True
            try:
                return validate_snapshot(snapshot.rows, self._memo, snapshot.broken)
            finally:
                self._validating.release()

        try:
            return await in_thread(
                validate_and_unlock, self._validate_timeout, name="desired-state-validate"
            )
        except TimeoutError:
            raise
        except Exception:
            if not ran:  # the thread did not start: nobody else will release it
                self._validating.release()
            raise

    def _late(self, reason: str) -> Inventory:
        """The last snapshot while validation lags (logged once until one is validated in time
        again), or ``DesiredStateUnavailable`` when there is none yet."""
        if not self._validation_late:
            log.error(
                "desired_state.validation_late",
                source=self.describe(),
                error=reason,
                keeping="last snapshot" if self._last is not None else "nothing",
            )
            self._validation_late = True
        if self._last is None:
            raise DesiredStateUnavailable(f"{self.describe()}: {reason}")
        return self._last

    @property
    def problems(self) -> Sequence[str]:
        """The refused rows of the last snapshot, one line each."""
        return self._problems

    async def _read(self) -> Snapshot:
        if self._connection is None or self._connection.is_closed():
            self._connection = await connect(self.address, self._password, timeout=self._timeout)
        snapshot = await read_snapshot(
            self._connection, self.schema, max_bytes=self._max_bytes, share=self._share
        )
        if self._checkpoints is not None:  # once a tick: each tick reads the whole snapshot
            await self._checkpoints.take(self._connection, self.schema)
        return snapshot

    def _why(self, exc: BaseException) -> str:
        if isinstance(exc, DatabaseError):
            return str(exc).removeprefix(f"{self.describe()}: ")
        if isinstance(exc, TimeoutError):
            return f"no snapshot within {self._timeout:g} s"
        return redacted(f"{type(exc).__name__}: {exc}", None)

    def _unreachable(self, reason: str) -> None:
        if self.reachable is not False:  # once per change; last_error keeps the latest reason
            log.error(
                "desired_state.unreachable",
                source=self.describe(),
                error=reason,
                keeping="last snapshot" if self._last is not None else "nothing",
            )
        self.reachable = False
        self.last_error = reason

    def _now_reachable(self) -> None:
        if self.reachable is False:
            log.info("desired_state.reachable", source=self.describe())
        self.reachable = True
        self.last_error = None

    async def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.terminate()

    async def listen(self, wake: Wake, resync: Resync) -> None:
        """Until cancelled: wake Marquees whose rows change (LISTEN/NOTIFY, one connection of
        its own), and ``resync`` after the listener had to reconnect."""
        listener = NotificationListener(
            self.address, self._password, timeout=self._timeout, probe_interval=self._probe_interval
        )
        await listener.run(wake, resync)

    def snapshot_age(self) -> float | None:
        """Seconds since the last good snapshot, or None before the first."""
        if self.last_snapshot_at is None:
            return None
        return time.monotonic() - self.last_snapshot_at

    def record_cycle(self, record: CycleRecord) -> None:
        """Hand a finished cycle's observed state over to be written back
        (``ObservedStateWriter``: batched, off the cycle; a failure is logged and counted)."""
        if self._observed is not None:
            self._observed.record(record)

    def write_failures(self) -> int:
        return self._observed.failures if self._observed is not None else 0

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed():
            await connection.close(timeout=self._timeout)
        if self._observed is not None:
            await self._observed.close()


NOTIFY_CHANNEL = "playguard_desired_state"
"""The channel the migrations' triggers send a changed Marquee's name on."""

WAKE_QUIET = 0.05
"""Seconds without a further notification that end a gathering: PostgreSQL delivers a
transaction's notifications together at its commit, so an edit of several rows has arrived
whole well within this, and a lone change waits no longer than this for company."""

WAKE_GATHER_MAX = 1.0
"""Seconds a gathering lasts at most after its first notification: a steady stream of edits
(never ``WAKE_QUIET`` apart) still wakes its Marquees at least this often, each once."""

RECONNECT_DELAY = 1.0
"""Seconds between attempts to get the listening connection back."""

Wake = Callable[[set[str]], Awaitable[object]]
Resync = Callable[[], Awaitable[object]]


class NotificationListener:
    """One dedicated connection (never a pooled one: LISTEN belongs to its session) that LISTENs
    on ``NOTIFY_CHANNEL`` and hands the changed Marquees' names to ``wake``, debounced.

    Notifications sent while it is disconnected are lost, so after every reconnect it LISTENs
    again and calls ``resync`` (a full tick). PgBouncer in transaction mode cannot carry a LISTEN
    (the session it was sent on is handed to others): point ``desired_state`` at PostgreSQL or a
    session-mode pool.
    """

    def __init__(
        self,
        address: PgAddress,
        password: PasswordSource,
        *,
        timeout: float,
        quiet: float = WAKE_QUIET,
        gather_max: float = WAKE_GATHER_MAX,
        probe_interval: float = LISTENER_PROBE_INTERVAL,
    ) -> None:
        self.address = address
        self._password = password
        self._timeout = timeout
        self._probe_interval = probe_interval
        self._quiet = quiet
        self._gather_max = gather_max
        self._pending: set[str] = set()
        self._arrived = asyncio.Event()
        self.connected: bool | None = None
        """None before the first attempt; then whether the listening connection is up."""

    async def _gather(self) -> None:
        """Wait until ``_quiet`` seconds pass without a notification, or ``_gather_max`` since
        the first, whichever comes first; ``_arrived`` is clear when this returns."""
        deadline = asyncio.get_running_loop().time() + self._gather_max
        while self._arrived.is_set():
            self._arrived.clear()
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), min(self._quiet, left))

    def _notified(self, connection: object, pid: int, channel: str, payload: str) -> None:
        self._pending.add(payload)
        self._arrived.set()

    async def run(self, wake: Wake, resync: Resync) -> None:
        """Listen until cancelled: reconnects on its own, wakes Marquees as their rows change."""
        waking = asyncio.create_task(self._wake_loop(wake), name="desired-state-wake")
        try:
            first = True
            while True:
                lost = await self._listen_once(resync if not first else None)
                first = first and not lost
                await asyncio.sleep(RECONNECT_DELAY)
        finally:
            waking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waking

    async def _listen_once(self, resync: Resync | None) -> bool:
        """One connection's life; True once it had been listening (so the next is a reconnect)."""
        try:
            connection = await connect(self.address, self._password, timeout=self._timeout)
        except DatabaseError as exc:
            if self.connected is not False:  # once per change
                log.warning(
                    "desired_state.listener_down",
                    source=self.address.describe(),
                    error=str(exc).removeprefix(f"{self.address.describe()}: "),
                )
            self.connected = False
            return False
        closed = asyncio.Event()
        connection.add_termination_listener(lambda _: closed.set())
        try:
            await connection.add_listener(NOTIFY_CHANNEL, self._notified)
            self.connected = True
            log.info("desired_state.listening", source=self.address.describe())
            if resync is not None:
                await resync()  # what changed while nobody listened
            await self._until_lost(connection, closed)
            log.warning("desired_state.listener_lost", source=self.address.describe())
            return True
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("desired_state.listener_lost", source=self.address.describe(),
                        error=redacted(f"{type(exc).__name__}: {exc}", None))  # fmt: skip
            return True
        finally:
            self.connected = False
            connection.terminate()

    async def _until_lost(self, connection: asyncpg.Connection, closed: asyncio.Event) -> None:
        """Return when the connection closes; raise when it stops answering a probe.

        A LISTENing connection only ever receives: after a black hole or a firewall that forgot
        it, nothing would tell it the database is gone until TCP's keepalive (two hours by
        default). So every ``probe_interval`` seconds it asks ``SELECT 1``, bounded by
        ``timeout``: a dead link is noticed within ``probe_interval + timeout``.
        """
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closed.wait(), self._probe_interval)
                return
            await connection.fetchval("SELECT 1", timeout=self._timeout)

    async def _wake_loop(self, wake: Wake) -> None:
        """Hand the gathered names to ``wake``, one gathering at a time: notifications that
        arrive while ``wake`` runs (a read, cycles starting) are the next gathering, so a burst
        costs one wake-up per gathering, never one per notification."""
        while True:
            await self._arrived.wait()
            await self._gather()
            names, self._pending = self._pending, set()
            if names:
                log.debug("desired_state.notified", marquees=sorted(names))
                await wake(names)
