"""The lab's PostgreSQL is a real server: password logins over TCP, a stop that a client sees,
and a start that brings back the same data."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import asyncpg
import pytest

from playguard_lab import PostgresServer
from playguard_lab.postgres import CLUSTER_LINK, ClusterUnreachable
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


def test_a_server_under_a_private_directory_changes_no_mode_above_its_own(
    tmp_path: Path, require_postgres: Path
) -> None:
    """As root the server runs as ``postgres``, which cannot pass a 0700 directory such as
    ``/root``: its cluster lives in a new directory under the temporary directory instead, the
    same one after a restart, removed when the ``with`` ends; no directory above changes mode."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    workdir = private / "lab" / "postgres"
    workdir.parent.mkdir()
    before = {path: stat.filemode(path.stat().st_mode) for path in workdir.parent.parents}
    with PostgresServer(workdir) as server:
        cluster = server.cluster_dir
        server.restart()
        assert server.cluster_dir == cluster, "a restart finds the same cluster"
        after = {path: stat.filemode(path.stat().st_mode) for path in workdir.parent.parents}
        assert after == before
        if os.geteuid() == 0:  # the lab runs as root; as its own user it stays in workdir
            assert cluster.parent == Path(tempfile.gettempdir())
            assert os.readlink(workdir / CLUSTER_LINK) == str(cluster)
    assert not cluster.exists() or cluster == workdir


def test_a_temporary_directory_its_user_cannot_reach_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, require_postgres: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root runs the server as another user")
    blocked = tmp_path / "blocked"
    blocked.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(blocked / "tmp"))
    server = PostgresServer(tmp_path / "postgres")
    with pytest.raises(ClusterUnreachable) as refused:
        server.start()
    message = str(refused.value)
    assert f"cannot reach {blocked / 'tmp'} for the lab's cluster (" in message, message
    assert " is drwx------) and the lab changes no directory it did not make" in message
    assert "\n" not in message
    assert not server.running
    assert list((tmp_path / "postgres").iterdir()) == []
