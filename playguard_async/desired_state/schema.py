"""Applying the shipped SQL migrations (``playguard_async/desired_state/migrations/NNNN_name.sql``).

``migrate`` runs in one transaction under a transaction-scoped advisory lock, so two replicas (or
an operator and a deploy script) migrating at once apply each file exactly once, and a failing file
leaves the schema as it was. Each applied file's SHA-256 is kept in ``schema_version``: a shipped
file edited after it was applied is an error, not a silent divergence.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from playguard_async.desired_state.pg import DatabaseError

MIGRATIONS_PACKAGE = "playguard_async.desired_state.migrations"
MIGRATION_FILE = re.compile(r"(?P<version>[0-9]{4})_(?P<name>[a-z0-9_]+)\.sql")

MIGRATION_LOCK_KEY = 0x706C_6179_6775_6172 & 0x7FFF_FFFF_FFFF_FFFF
"""pg_advisory_xact_lock key that serialises migrations ("playguar" in ASCII)."""

_SCHEMA_VERSION_TABLE = """
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


async def migrate(connection: asyncpg.Connection) -> list[Migration]:
    """Apply the migrations the database lacks, all in one transaction; returns those applied
    (none when it is up to date)."""
    applied_now: list[Migration] = []
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
        await connection.execute(_SCHEMA_VERSION_TABLE)
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
                    f"migration {migration.version:04d}_{migration.name}.sql failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from None
            await connection.execute(
                "INSERT INTO schema_version (version, name, sha256) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.sha256,
            )
            applied_now.append(migration)
    return applied_now


async def schema_version(connection: asyncpg.Connection) -> int | None:
    """The highest applied migration, or None before the first ``migrate``."""
    exists = await connection.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
    if not exists:
        return None
    version: int | None = await connection.fetchval("SELECT max(version) FROM schema_version")
    return version
