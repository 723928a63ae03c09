"""A database of the lab's PostgreSQL for a benchmark: created, then migrated and filled with an
inventory by the code ``PYTHONPATH`` names, in a process of its own.

A process of its own because an import reads the whole YAML inventory first, many times its size
in memory (bench/README.md, "Dispatch"), which would otherwise stay in the benchmark's heap; and
because each code version a benchmark measures must read a schema its own migrations made.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg

from playguard_lab import PostgresServer

PASSWORD_VARIABLE = "BENCH_PG_PASSWORD"
"""The environment variable the importing process reads the server's password from (never argv)."""


async def create_database(
    server: PostgresServer, name: str, *, extensions: Sequence[str] = ()
) -> str:
    """Database ``name`` on ``server``, with ``extensions`` created in it; its URL."""
    admin = await asyncpg.connect(server.url_of("postgres"), password=server.password)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    connection = await asyncpg.connect(server.url_of(name), password=server.password)
    try:
        for extension in extensions:
            await connection.execute(f"CREATE EXTENSION {extension}")
    finally:
        await connection.close()
    return server.url_of(name)


def run_import(script: str, server: PostgresServer, url: str, inventory: Path, code: Path) -> None:
    """``script --setup url inventory`` with ``PYTHONPATH`` at ``code`` and the server's password
    in ``PASSWORD_VARIABLE``: the script's ``--setup`` calls ``import_inventory``."""
    env = {**os.environ, "PYTHONPATH": str(code), PASSWORD_VARIABLE: server.password}
    command = [sys.executable, script, "--setup", url, str(inventory)]
    if subprocess.run(command, env=env, check=False).returncode:
        raise SystemExit(f"{url}: the database could not be set up (above)")


def import_inventory(
    database_url: str,
    inventory: Path,
    *,
    max_bytes: int | None = None,
    timeout: float | None = None,
) -> None:
    """Migrate the database and import ``inventory``, with the code ``PYTHONPATH`` names.
    ``max_bytes`` and ``timeout`` bound the inventory's read (a fleet past the default 8 MiB);
    left out, the code's defaults (older code knows no such arguments)."""
    from playguard_async.desired_state.postgres.connection import PgAddress, connect, password_from  # noqa: PLC0415
    from playguard_async.desired_state.postgres.schema import migrate  # noqa: PLC0415
    from playguard_async.desired_state.postgres.transfer import (  # noqa: PLC0415
        import_inventory as import_rows,
    )

    bounds: dict[str, Any] = {"max_bytes": max_bytes, "timeout": timeout}
    kwargs = {name: value for name, value in bounds.items() if value is not None}

    async def load() -> None:
        password = password_from(os.environ[PASSWORD_VARIABLE], None)
        connection = await connect(PgAddress.parse(database_url), password, timeout=30)
        try:
            await migrate(connection)
            await import_rows(connection, inventory, **kwargs)
        finally:
            await connection.close()

    asyncio.run(load())
