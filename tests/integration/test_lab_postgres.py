"""The lab's PostgreSQL is a real server: password logins over TCP, a stop that a client sees,
and a start that brings back the same data."""

from __future__ import annotations

import asyncpg
import pytest

from tests.support.postgres import LabDatabase


async def test_password_login_over_tcp_and_wrong_password_refused(postgres: LabDatabase) -> None:
    connection = await postgres.connect()
    try:
        assert await connection.fetchval("SELECT current_database()") == postgres.name
    finally:
        await connection.close()
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(postgres.url, password="not-the-password")


async def test_restart_keeps_the_data_and_a_stop_is_seen_by_clients(
    postgres: LabDatabase,
) -> None:
    connection = await postgres.connect()
    await connection.execute("CREATE TABLE kept (value text); INSERT INTO kept VALUES ('x')")
    postgres.server.stop()
    with pytest.raises((asyncpg.PostgresConnectionError, OSError)):
        await connection.fetchval("SELECT 1")
    await connection.close()
    postgres.server.start()
    connection = await postgres.connect()
    try:
        assert await connection.fetchval("SELECT value FROM kept") == "x"
    finally:
        await connection.close()
