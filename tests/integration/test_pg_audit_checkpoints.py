"""The change log checked against signed checkpoints kept outside the database, on the lab's
PostgreSQL: each forgery the review made (a chain rewritten with hashes computed again, entries
deleted from the middle, the tail, a whole chain, the whole table, an entry forged into history
the checkpoint covers) found by ``playguard audit verify`` with the daemon's settings, whether
made as the log's owner (the daemon's role that migrated) or as a superuser with triggers off;
the checkpoint file itself is tamper-evident; the daemon's source checkpoints at each whole read.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from structlog.testing import capture_logs

from playguard_async.desired_state.postgres.audit_checkpoint import (
    CheckpointWriter,
    read_checkpoints,
    read_key,
    take_checkpoint,
)
from playguard_async.desired_state.postgres.connection import PgAddress, password_from
from playguard_async.desired_state.postgres.schema import migrate
from playguard_async.desired_state.postgres.source import PostgresDesiredState
from playguard_async.desired_state.postgres.transfer import import_inventory
from tests.support.app_database import AppFleet, create_app, limited_role
from tests.support.pg_inventory import full_document, write_inventory
from tests.support.postgres import LabDatabase, playguard_with

REHASH = """
DO $$
DECLARE entry record; previous text := ''; chain_of text := NULL;
BEGIN
    FOR entry IN SELECT * FROM playguard.changes ORDER BY chain, seq LOOP
        IF chain_of IS DISTINCT FROM entry.chain THEN previous := ''; END IF;
        chain_of := entry.chain;
        UPDATE playguard.changes SET prev_hash = previous WHERE id = entry.id;
        previous := encode(sha256(convert_to(previous || '|' ||
            playguard.playguard_change_canonical_roles(entry.id, entry.at, entry.relation,
                entry.key, entry.columns, entry.operation, entry.actor, entry.marquees,
                entry.chain, entry.seq, entry.session_role, entry.acting_role), 'UTF8')), 'hex');
        UPDATE playguard.changes SET hash = previous WHERE id = entry.id;
    END LOOP;
END;
$$
"""
"""Every chain's hashes computed again, as the trigger computes them: what a forger with the
table's rights does after changing it, so that the hash walk alone finds nothing."""

FORGERIES = {
    "rewrite": [
        "UPDATE playguard.changes SET actor = 'mallory' WHERE chain = 'edge-0' AND seq = 1",
        REHASH,
    ],
    "delete-middle": [
        "DELETE FROM playguard.changes WHERE chain = 'edge-0' AND seq = 2",
        "UPDATE playguard.changes SET seq = seq + 100000 WHERE chain = 'edge-0' AND seq > 2",
        "UPDATE playguard.changes SET seq = seq - 100001 WHERE chain = 'edge-0' AND seq > 100000",
        REHASH,
    ],
    "delete-tail": [
        "DELETE FROM playguard.changes WHERE id = "
        "(SELECT max(id) FROM playguard.changes WHERE chain = 'edge-0')",
    ],
    "delete-chain": ["DELETE FROM playguard.changes WHERE chain = '*'"],
    "delete-table": ["DELETE FROM playguard.changes"],
    "forged-into-history": [
        "UPDATE playguard.changes SET seq = seq + 100000 WHERE chain = 'edge-0' AND seq >= 2",
        "UPDATE playguard.changes SET seq = seq - 99999 WHERE chain = 'edge-0' AND seq > 100000",
        "INSERT INTO playguard.changes (at, relation, key, columns, operation, actor, marquees, "
        "chain, seq, prev_hash, hash) VALUES (now() - interval '1 day', 'playguard.playgrounds', "
        "'shop-0-1', '{branch}', 'UPDATE', 'cto@example.com', '{edge-0}', 'edge-0', 2, '', '')",
        REHASH,
    ],
}
"""What each forgery runs (the chain named is what verify must name)."""

NAMED = {
    "rewrite": "chain 'edge-0'",
    "delete-middle": "chain 'edge-0'",
    "delete-tail": "chain 'edge-0'",
    "delete-chain": "chain '*'",
    "delete-table": "chain 'edge-0'",
    "forged-into-history": "chain 'edge-0'",
}


@pytest.fixture
async def owners_log(postgres: LabDatabase, tmp_path: Path) -> AsyncIterator[LabDatabase]:
    """A database whose change log a role that may create only in playguard's schema migrated
    and so owns (the daemon's role, before the README's hand-over), holding the full fleet;
    that role's address."""
    await create_app(postgres, AppFleet())
    async with limited_role(postgres) as role:
        connection = await role.database.connect()
        try:
            await migrate(connection)
            await import_inventory(connection, write_inventory(tmp_path, full_document()))
        finally:
            await connection.close()
        yield role.database


def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoint.key"
    path.write_text(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    return path


def checkpoint_settings(tmp_path: Path) -> dict[str, str]:
    return {"PLAYGUARD_AUDIT_CHECKPOINT_FILE": str(tmp_path / "checkpoints"),
            "PLAYGUARD_AUDIT_CHECKPOINT_KEY_FILE": str(key_file(tmp_path))}  # fmt: skip


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
@pytest.mark.parametrize("role", ["owner", "superuser-replica"])
async def test_every_forgery_older_than_the_newest_checkpoint_fails_verify_naming_its_chain(
    postgres: LabDatabase, owners_log: LabDatabase, tmp_path: Path, forgery: str, role: str
) -> None:
    settings = checkpoint_settings(tmp_path)
    taken = playguard_with(postgres, "audit", "checkpoint", settings=settings)
    assert (taken.returncode, taken.stderr) == (0, ""), taken.stdout
    before = playguard_with(postgres, "audit", "verify", settings=settings)
    assert before.returncode == 0, before.stdout
    assert "newest checkpoint " in before.stdout

    forger = await (owners_log if role == "owner" else postgres).connect()
    try:
        if role == "owner":
            await forger.execute("GRANT UPDATE, DELETE ON playguard.changes TO CURRENT_USER")
        else:
            await forger.execute("SET session_replication_role = replica")
        async with forger.transaction():
            for statement in FORGERIES[forgery]:
                await forger.execute(statement)
    finally:
        await forger.close()
    done = playguard_with(postgres, "audit", "verify", "--json", settings=settings)
    text = playguard_with(postgres, "audit", "verify", settings=settings)

    assert done.returncode == text.returncode == 1, text.stdout
    found = json.loads(done.stdout)
    assert found["intact"] is False
    assert found["checkpoint"]["configured"] is True
    assert found["checkpoint"]["age"] >= 0
    assert NAMED[forgery] in text.stdout
    assert "checkpointed" in text.stdout, text.stdout
    assert "newest checkpoint " in text.stdout


async def test_a_log_changed_only_by_its_triggers_verifies_after_checkpoints_and_a_prune(
    fleet: asyncpg.Connection, tmp_path: Path
) -> None:
    key = read_key(key_file(tmp_path))
    path = tmp_path / "checkpoints"
    first = await take_checkpoint(fleet, "playguard", path, key)
    await fleet.execute("UPDATE playguard.playgrounds SET branch = 'next' WHERE name = 'shop-0-1'")
    second = await take_checkpoint(fleet, "playguard", path, key)
    third = await take_checkpoint(fleet, "playguard", path, key)

    log = read_checkpoints(path, key)

    assert len(first.heads) == 4, "every chain at the first"
    assert list(second.heads) == ["edge-0"], "only the chain that moved"
    assert third.heads == {}, "a tick with no change adds a line with no head"
    assert (log.lines, log.problems, log.newest) == (3, [], third)


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        pytest.param(lambda lines: [lines[0], lines[2]], "does not follow the line before it",
                     id="a line removed"),
        pytest.param(lambda lines: [lines[0], lines[1].replace('"high":', '"high":1'), lines[2]],
                     "its MAC is wrong", id="a line changed"),
        pytest.param(lambda lines: [lines[0], "{not json", lines[2]],
                     "not a checkpoint of the written shape", id="a line of another shape"),
    ],
)  # fmt: skip
async def test_a_checkpoint_file_edited_by_hand_is_a_problem_naming_its_line(
    fleet: asyncpg.Connection, tmp_path: Path, edit: object, said: str
) -> None:
    key = read_key(key_file(tmp_path))
    path = tmp_path / "checkpoints"
    for _ in range(3):
        await take_checkpoint(fleet, "playguard", path, key)
    lines = path.read_text().splitlines()
    assert callable(edit)
    path.write_text("\n".join(edit(lines)) + "\n")

    log = read_checkpoints(path, key)

    assert any(f"{path} line 2: {said}" in problem for problem in log.problems), log.problems


async def test_the_daemons_source_checkpoints_at_each_whole_read(
    fleet: asyncpg.Connection, postgres: LabDatabase, tmp_path: Path
) -> None:
    path = tmp_path / "checkpoints"
    source = PostgresDesiredState(
        PgAddress.parse(postgres.url), password_from(postgres.password, None), timeout=5.0,
        checkpoints=CheckpointWriter(path, key_file(tmp_path)),
    )  # fmt: skip
    made = time.monotonic()
    try:
        await source.load()
        await source.load()
    finally:
        await source.close()

    log = read_checkpoints(path, read_key(tmp_path / "checkpoint.key"))
    assert (log.lines, log.problems) == (2, [])
    since_made = time.monotonic() - made
    age = source.audit_checkpoint_age()
    assert age is not None
    assert age < since_made, "the age counts from the last checkpoint, not from the start"


async def test_a_checkpoint_that_fails_is_logged_and_the_read_goes_on(
    fleet: asyncpg.Connection, postgres: LabDatabase, tmp_path: Path
) -> None:
    path = tmp_path / "no-such-directory" / "checkpoints"
    source = PostgresDesiredState(
        PgAddress.parse(postgres.url), password_from(postgres.password, None), timeout=5.0,
        checkpoints=CheckpointWriter(path, key_file(tmp_path)),
    )  # fmt: skip
    made = time.monotonic()
    try:
        with capture_logs() as logs:
            inventory = await source.load()
    finally:
        await source.close()
    since_made = time.monotonic() - made
    age = source.audit_checkpoint_age()
    assert age is not None
    assert age >= since_made, "with no checkpoint taken, the age counts from the start"

    assert [marquee.name for marquee in inventory.marquees] == ["edge-0", "edge-1", "edge-2"]
    (failed,) = [line for line in logs if line["event"] == "audit.checkpoint_failed"]
    assert failed["file"] == str(path)
    assert "cannot open the checkpoints" in failed["error"]
    assert not path.parent.exists()
