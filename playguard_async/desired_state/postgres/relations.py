"""The relations playguard reads from PostgreSQL (its tables, or the application's views of the
same names): their models, keys and columns, the optional ``marquee_steering``, and how a read of
one that fails is told (a view that raises is the relation's failure, not an outage)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog
from pydantic import BaseModel, ConfigDict

from playguard_async.desired_state.model import (
    AgentChat,
    Marquee,
    Mode,
    Playground,
    Playspec,
    Registry,
)
from playguard_async.desired_state.postgres.connection import (
    error_text,
    qualified,
    redacted,
)
from playguard_async.desired_state.postgres.mapping import (
    expected_columns,
)
from playguard_async.desired_state.windows import Window

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
        return measured(f"SELECT {quoted} FROM {self._rows(schema, narrow)}")

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


class ReadFailed(Exception):
    def __init__(self, table: str, line: str) -> None:
        super().__init__(line)
        self.table, self.line = table, line

    @classmethod
    def of(cls, schema: str, table: str, exc: BaseException) -> ReadFailed:
        """A relation whose view raised ``exc`` when read."""
        why = redacted(error_text(exc), None)
        return cls(table, f"{schema}.{table}: cannot be read: {why}")


VIEW_ERROR_CLASSES = frozenset({"21", "22", "23", "2F", "38", "39", "42", "0A", "P0"})
"""SQLSTATE classes a view's own definition raises when read (cardinality, data exception,
constraint, routine exceptions, access rule or privilege, unsupported feature, PL/pgSQL RAISE);
others (connection, shutdown, resources) are the database's state, retried as an outage."""


def view_error(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.InvalidCachedStatementError | asyncpg.OutdatedSchemaCacheError):
        return False  # our prepared plan is stale, not the view wrong: ``read_snapshot`` retries
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, asyncpg.PostgresError) and sqlstate[:2] in VIEW_ERROR_CLASSES


def measured(query: str) -> str:
    """The bytes ``query``'s rows are as text, as the server measures them before sending."""
    return f"SELECT coalesce(sum(octet_length(rows::text)), 0)::bigint FROM ({query}) AS rows"
