"""Reading the change log (migration 0009's ``changes``): for ``playguard why``, one Marquee's
entries since a time, newest ``limit`` of them, in one bounded read-only statement; for a
snapshot and a checkpoint, the log's version their transaction sees (``log_version``).

The entries are the triggers' (``playguard_record_change``): names, never values. What is read
is outside input all the same (the actor is whatever the application set): the reader of a
``ChangeEntry`` bounds and escapes its texts before showing them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from playguard_async.desired_state.postgres.connection import (
    PasswordSource,
    PgAddress,
    connect,
    qualified,
)

_VERSION = """
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
"""Ids below the highest that a version looks through for unseen ones."""


async def log_version(
    connection: asyncpg.Connection, schema: str, *, kept: int
) -> tuple[int | None, list[int]]:
    """The highest id the transaction's snapshot sees (None: an empty log) and, ascending, the
    highest ``kept`` ids below it that it does not (among ``UNSEEN_WINDOW``)."""
    row = await connection.fetchrow(
        _VERSION.format(changes=qualified(schema, "changes")), UNSEEN_WINDOW, kept
    )
    if row is None or row["high"] is None:
        return None, []
    return row["high"], sorted(row["unseen"])


CHANGES_SHOWN = 200
"""Entries ``why`` reads at most: the newest, when more fall within ``--since``."""

_READ = """
SELECT id, extract(epoch FROM at)::float8 AS at, relation, key, columns, operation, actor,
       {roles}
FROM {changes}
WHERE marquees @> ARRAY[$1::text] AND at >= to_timestamp($2)
  AND ($3::text[] IS NULL OR key = ANY ($3))
ORDER BY id DESC
LIMIT $4
"""
"""The GIN index on ``marquees`` finds the Marquee's entries (its chain's and the fleet chain's
that name it); ``$3`` narrows to rows keyed by a Playground (or its Marquee), when asked. A log
of before migration 0010 has no roles: ``{roles}`` is then NULLs."""

_ROLES = "session_role, acting_role"
_HAS_ROLES = """
SELECT EXISTS (SELECT FROM information_schema.columns
               WHERE table_schema = $1 AND table_name = 'changes' AND column_name = 'session_role')
"""
_NO_ROLES = "NULL::text AS session_role, NULL::text AS acting_role"


@dataclass(frozen=True)
class ChangeEntry:
    """One entry of the change log: ``relation``'s row ``key`` had ``columns`` changed
    (``operation``) by ``actor`` (a claim) logged in as ``session_role`` (acting as
    ``acting_role`` when it differs) in a transaction of time ``at`` (Unix seconds). Roles are
    None in entries made before migration 0010."""

    change_id: int
    at: float
    relation: str
    key: str | None
    columns: tuple[str, ...]
    operation: str
    actor: str
    session_role: str | None = None
    acting_role: str | None = None

    def who(self) -> str:
        """Who made it, the claim told from the fact: ``cto@example.com (claimed) as role app``,
        ``role app`` when nothing else was claimed, the actor alone for an entry of before."""
        if self.session_role is None:
            return self.actor
        role = f"role {self.session_role}"
        if self.acting_role is not None:
            role += f" (acting as {self.acting_role})"
        return role if self.actor == self.session_role else f"{self.actor} (claimed) as {role}"


async def read_changes(
    connection: asyncpg.Connection,
    schema: str,
    marquee: str,
    *,
    since: float,
    keys: Sequence[str] | None = None,
    limit: int = CHANGES_SHOWN,
) -> list[ChangeEntry]:
    """The entries concerning ``marquee`` from ``since``, keyed by one of ``keys`` (all when
    None): the newest ``limit``, oldest first, read in a read-only transaction."""
    async with connection.transaction(readonly=True):
        with_roles = await connection.fetchval(_HAS_ROLES, schema)
        rows = await connection.fetch(
            _READ.format(changes=qualified(schema, "changes"),
                         roles=_ROLES if with_roles else _NO_ROLES),
            marquee, since, None if keys is None else list(keys), limit,
        )  # fmt: skip
    return [
        ChangeEntry(
            row["id"],
            row["at"],
            row["relation"],
            row["key"],
            tuple(row["columns"]),
            row["operation"],
            row["actor"],
            row["session_role"],
            row["acting_role"],
        )
        for row in reversed(rows)
    ]


async def read_marquee_changes(
    address: PgAddress,
    password: PasswordSource,
    schema: str,
    marquee: str,
    *,
    since: float,
    keys: Sequence[str] | None,
    timeout: float,
) -> list[ChangeEntry]:
    """``read_changes`` on a connection of its own, opened with the daemon's settings and closed
    after, the whole bounded by ``timeout`` (beyond connecting)."""
    connection = await connect(address, password, timeout=timeout)
    try:
        async with asyncio.timeout(timeout):
            return await read_changes(connection, schema, marquee, since=since, keys=keys)
    finally:
        connection.terminate()
