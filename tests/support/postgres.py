"""A database of its own per test on the lab's PostgreSQL, so tests never see each other's rows."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from playguard_async.desired_state.postgres.notify import NOTIFY_CHANNEL
from playguard_async.desired_state.postgres.schema import migrate
from playguard_async.desired_state.postgres.transfer import import_inventory
from playguard_lab import PostgresServer, free_port
from tests.support.daemon import PLAYGUARD, REPO_ROOT


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


def playguard_with(
    database: LabDatabase,
    *args: str,
    password: str | None = None,
    url: str | None = None,
    settings: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The installed ``playguard`` running this tree's code (``PYTHONPATH``, as the daemon's
    runner sets it: the virtualenv may have another tree installed) with ``database`` as its
    desired state (password in the environment, as an operator's would be) and no other
    settings of ours but ``settings`` (environment variables)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PLAYGUARD_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(settings or {})
    env["PLAYGUARD_DESIRED_STATE"] = url or database.url
    env["PLAYGUARD_DESIRED_STATE_PASSWORD"] = password or database.password
    env["PLAYGUARD_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    return subprocess.run(
        [str(PLAYGUARD), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


async def notified_by(
    listen_on: LabDatabase, writer: asyncpg.Connection, statement: str
) -> set[str]:
    """The Marquee names the wake-up channel carries, heard on a connection of its own to
    ``listen_on``, when ``writer`` runs ``statement`` with only ``public`` on its search_path
    (as an application's sessions have it)."""
    listener = await listen_on.connect()
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(NOTIFY_CHANNEL, lambda *args: heard.put_nowait(args[3]))
    try:
        await writer.execute("SET search_path TO public")
        await writer.execute(statement)
        await writer.execute(f"NOTIFY {NOTIFY_CHANNEL}, 'end-of-test'")
        names = set()
        async with asyncio.timeout(5):
            while (name := await heard.get()) != "end-of-test":
                names.add(name)
    finally:
        await listener.close()
    return names
