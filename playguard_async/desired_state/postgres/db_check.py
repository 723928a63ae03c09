"""``playguard db check``: whether the relations playguard reads in its schema (its own tables or
the application owner's views) give a desired state, said the way the daemon would say it.

It reads one snapshot exactly as a tick does and validates it with the same models, so what it
reports is what the daemon would log and leave out: a relation or column missing, a column of
the wrong kind of type, a view that fails when read, a NULL or repeated name, a reference to a
name no row has, a value the models refuse. Every problem with the relations' shape is listed,
not only the first.
"""

from __future__ import annotations

import asyncpg

from playguard_async.desired_state.postgres.mapping import CATALOG_QUERY, check_relations
from playguard_async.desired_state.postgres.relations import EXPECTED_COLUMNS, KEY_COLUMNS, TABLES
from playguard_async.desired_state.postgres.snapshot import MappingUnreadable, read_snapshot
from playguard_async.desired_state.postgres.validation import validate_snapshot

_KINDS = {"r": "table", "p": "table", "v": "view", "m": "materialized view", "f": "foreign table"}

_RELATION_KINDS = """
SELECT c.relname::text, c.relkind::text FROM pg_class c
WHERE c.relnamespace = to_regnamespace($1) AND c.relname = ANY ($2::text[])
"""


async def check_mapping(connection: asyncpg.Connection, schema: str) -> tuple[list[str], str]:
    """The problems, one line each (none: the mapping and every row are good), and a summary
    of what was read."""
    names = [table.name for table in TABLES]
    catalog = await connection.fetch(CATALOG_QUERY, schema, names)
    checks = check_relations(schema, EXPECTED_COLUMNS, KEY_COLUMNS, catalog)
    problems = [line for check in checks.values() for line in check.problems]
    try:
        snapshot = await read_snapshot(connection, schema)
    except MappingUnreadable as exc:
        reason = str(exc)
        if not any(reason.startswith(line) for line in problems):
            problems.append(reason)
        return problems, ""
    validated = validate_snapshot(snapshot.rows, broken=snapshot.broken)
    problems += [line for line in validated.problems if line not in problems]
    kinds = dict(await connection.fetch(_RELATION_KINDS, f'"{schema}"', names))
    read = ", ".join(
        f"{schema}.{table.name} ({_KINDS.get(kinds.get(table.name, ''), '?')}, "
        f"{len(snapshot.rows[table.name])} rows)"
        for table in TABLES
    )
    return problems, f"ok: {read}; every row valid"
