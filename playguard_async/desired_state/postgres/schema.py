"""Applying the shipped SQL migrations (``desired_state/postgres/migrations/NNNN_name.sql``) inside
playguard's own schema (``desired_state_schema``, default ``playguard``).

``migrate`` runs in one transaction under a transaction-scoped advisory lock keyed by the schema,
so two replicas (or an operator and a deploy script) migrating at once apply each file exactly
once, and a failing file leaves the database as it was. The files name no schema: they run with
``search_path`` set to playguard's schema alone, so everything they create lands there and nothing
in the application's ``public``. Each applied file's SHA-256 is kept in that schema's
``schema_version``: a shipped file edited after it was applied is an error, not a silent
divergence (the released files are therefore never rewritten to name the schema).

A database laid out by releases that created everything in ``public`` (migrations 0001-0003 and a
``public.schema_version`` that lists them) is moved first, in the same transaction: each of those
objects by ``ALTER ... SET SCHEMA``, which keeps rows, constraints, indexes and triggers, and the
remaining migrations then apply in the new schema as usual.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from playguard_async.desired_state.postgres.connection import (
    DEFAULT_SCHEMA,
    DatabaseError,
    qualified,
)

MIGRATIONS_PACKAGE = "playguard_async.desired_state.postgres.migrations"
MIGRATION_FILE = re.compile(r"(?P<version>[0-9]{4})_(?P<name>[a-z0-9_]+)\.sql")

LEGACY_SCHEMA = "public"
"""Where releases before the own schema created everything."""

LEGACY_OBJECTS = {
    1: ("TABLE marquees", "TABLE registries", "TABLE playspecs", "TABLE playgrounds",
        "TABLE agent_chats", "FUNCTION playguard_name_ok(text)",
        "FUNCTION playguard_safe_chars(text)", "FUNCTION playguard_remote_path_ok(text, boolean)",
        "FUNCTION playguard_branch_ok(text)", "FUNCTION playguard_host_ok(text)",
        "FUNCTION playguard_image_ok(text)", "FUNCTION playguard_images_ok(text[])"),
    2: ("FUNCTION playguard_notify_marquees(text[])", "FUNCTION playguard_row_changed()"),
    3: ("TABLE marquee_status", "TABLE playground_status"),
}  # fmt: skip
"""What each of the migrations released before the own schema created in ``public``: indexes,
constraints and triggers go with their tables."""


def migration_lock_key(schema: str) -> int:
    """The pg_advisory_xact_lock key serialising migrations of ``schema``: a hash of its name,
    so installations in two schemas of one database do not wait for each other."""
    digest = hashlib.sha256(f"playguard migrate {schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


SCHEMA_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version integer PRIMARY KEY,
    name text NOT NULL,
    sha256 text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def shipped_migrations() -> list[Migration]:
    """The package's migrations in version order."""
    found = []
    for entry in resources.files(MIGRATIONS_PACKAGE).iterdir():
        match = MIGRATION_FILE.fullmatch(entry.name)
        if match:
            sql = entry.read_text(encoding="utf-8")
            found.append(Migration(int(match["version"]), match["name"], sql))
    return sorted(found, key=lambda migration: migration.version)


async def migrate(connection: asyncpg.Connection, schema: str = DEFAULT_SCHEMA) -> list[Migration]:
    """Apply the migrations ``schema`` lacks, all in one transaction; returns those applied
    (none when it is up to date). Creates the schema when it does not exist (that needs CREATE
    on the database; a DBA may create it beforehand instead), moves a ``public`` layout in."""
    applied_now: list[Migration] = []
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", migration_lock_key(schema))
        await _own_schema(connection, schema)
        await connection.execute(f'SET LOCAL search_path TO "{schema}"')
        await _move_legacy_layout(connection, schema)
        await connection.execute(SCHEMA_VERSION_TABLE)
        applied = {
            row["version"]: row["sha256"]
            for row in await connection.fetch("SELECT version, sha256 FROM schema_version")
        }
        for migration in shipped_migrations():
            known = applied.get(migration.version)
            if known is not None:
                if known != migration.sha256:
                    raise DatabaseError(
                        f"migration {migration.version:04d}_{migration.name}.sql differs from "
                        "the one applied to this database (sha256 mismatch); never edit a "
                        "released migration, add a new one"
                    )
                continue
            try:
                await connection.execute(migration.sql)
            except asyncpg.PostgresError as exc:
                raise DatabaseError(
                    f"migration {migration.version:04d}_{migration.name}.sql failed in schema "
                    f"{schema}: {type(exc).__name__}: {exc}"
                ) from None
            await connection.execute(
                "INSERT INTO schema_version (version, name, sha256) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.sha256,
            )
            applied_now.append(migration)
    return applied_now


async def _own_schema(connection: asyncpg.Connection, schema: str) -> None:
    """Create ``schema`` unless it exists. Checked first: CREATE SCHEMA IF NOT EXISTS asks for
    CREATE on the database even when the schema is there, which a role limited to its schema
    lacks."""
    if await connection.fetchval("SELECT to_regnamespace($1) IS NOT NULL", f'"{schema}"'):
        return
    try:
        await connection.execute(f'CREATE SCHEMA "{schema}"')
    except asyncpg.InsufficientPrivilegeError:
        raise DatabaseError(
            f"schema {schema} does not exist and this role may not create it: have a database "
            f'owner run CREATE SCHEMA "{schema}" AUTHORIZATION <this role> (see the docs, page '
            "getting-started/postgresql.md)"
        ) from None


async def _move_legacy_layout(connection: asyncpg.Connection, schema: str) -> None:
    """Move what the releases before the own schema created in ``public`` into ``schema``,
    when ``schema`` has no ``schema_version`` yet and ``public`` has ours (its columns, and only
    our migrations' names): an application's own ``schema_version`` is left alone."""
    if await connection.fetchval("SELECT to_regclass($1) IS NOT NULL",
                                 qualified(schema, "schema_version")):  # fmt: skip
        return
    legacy = qualified(LEGACY_SCHEMA, "schema_version")
    columns = await connection.fetchval(
        "SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute "
        "WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped",
        legacy,
    )
    if columns != ["version", "name", "sha256", "applied_at"]:
        return
    shipped = {migration.version: migration.name for migration in shipped_migrations()}
    applied = {row["version"]: row["name"] for row in
               await connection.fetch(f"SELECT version, name FROM {legacy}")}  # fmt: skip
    if not applied or any(shipped.get(version) != name for version, name in applied.items()):
        return
    for version in sorted(applied):
        for kind_and_name in LEGACY_OBJECTS.get(version, ()):
            kind, name = kind_and_name.split(" ", 1)
            await connection.execute(f'ALTER {kind} "{LEGACY_SCHEMA}".{_quoted_object(name)} '
                                     f'SET SCHEMA "{schema}"')  # fmt: skip
    await connection.execute(f'ALTER TABLE {legacy} SET SCHEMA "{schema}"')


def _quoted_object(name: str) -> str:
    """``name`` or ``name(args)`` with the name quoted (the argument types are SQL as written)."""
    base, _, arguments = name.partition("(")
    return f'"{base}"' + (f"({arguments}" if arguments else "")


async def schema_version(
    connection: asyncpg.Connection, schema: str = DEFAULT_SCHEMA
) -> int | None:
    """The highest migration applied in ``schema``, or None before the first ``migrate``."""
    table = qualified(schema, "schema_version")
    exists = await connection.fetchval("SELECT to_regclass($1) IS NOT NULL", table)
    if not exists:
        return None
    version: int | None = await connection.fetchval(f"SELECT max(version) FROM {table}")
    return version
