"""A database of its own per test on the lab's PostgreSQL, so tests never see each other's rows."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from playguard_async.desired_state.schema import migrate
from playguard_async.desired_state.transfer import import_inventory
from playguard_lab import PostgresServer


@dataclass(frozen=True)
class LabDatabase:
    """Where a test's database is: ``url`` without the password, as the daemon's setting is."""

    server: PostgresServer
    name: str
    url: str
    password: str

    async def connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.url, password=self.password)


@asynccontextmanager
async def fresh_database(server: PostgresServer) -> AsyncIterator[LabDatabase]:
    """Create an empty database, yield it, drop it (its sessions too) on every way out."""
    name = f"test_{secrets.token_hex(6)}"
    await _as_admin(server, f"CREATE DATABASE {name}")
    try:
        yield LabDatabase(server, name, server.url_of(name), server.password)
    finally:
        server.ensure_running()  # the test may have stopped it
        await _as_admin(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def _as_admin(server: PostgresServer, statement: str) -> None:
    """Run ``statement`` on a connection of its own: one kept across the test would not survive
    a test that restarts the server."""
    admin = await asyncpg.connect(server.url, password=server.password)
    try:
        await admin.execute(statement)
    finally:
        await admin.close()


async def migrated_fleet(postgres: LabDatabase, inventory: Path) -> asyncpg.Connection:
    """A connection to ``postgres`` once it is migrated and holds ``inventory``'s fleet; the
    caller closes it (it is closed here if the set-up fails)."""
    connection = await postgres.connect()
    try:
        await migrate(connection)
        await import_inventory(connection, inventory)
    except BaseException:
        await connection.close()
        raise
    return connection
