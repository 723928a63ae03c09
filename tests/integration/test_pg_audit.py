"""The audit of desired-state changes on the lab's PostgreSQL (migration 0009): the trigger that
wakes replicas also appends one entry per changed row, naming the transaction's actor, and
``playguard audit verify`` finds an entry changed or cut out of its chain."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from playguard_async.desired_state.postgres.audit_chain import (
    LogOwner,
    canonical,
    log_owner,
    prune_changes,
    verify_changes,
)
from playguard_async.desired_state.postgres.change_log import read_changes
from playguard_async.desired_state.postgres.schema import migrate
from playguard_async.desired_state.postgres.snapshot import read_marquees, read_snapshot
from playguard_async.desired_state.postgres.transfer import import_inventory
from playguard_async.operator.why import change_event
from tests.support.app_database import AppFleet, create_app, limited_role, literal
from tests.support.docs import section
from tests.support.pg_inventory import full_document, write_inventory
from tests.support.postgres import LabDatabase, playguard_with

NEWEST = "SELECT * FROM playguard.changes ORDER BY id DESC LIMIT 1"
MOVE_BRANCH = "UPDATE playguard.playgrounds SET branch = $1 WHERE name = 'shop-0-1'"


async def _moved_by(
    fleet: asyncpg.Connection, actor: str | None, branch: str
) -> list[asyncpg.Record]:
    """The entries one application transaction leaves when it moves shop-0-1 to ``branch``
    (with ``SET LOCAL playguard.actor`` = ``actor`` unless None)."""
    before = await fleet.fetchval("SELECT coalesce(max(id), 0) FROM playguard.changes")
    async with fleet.transaction():
        if actor is not None:
            await fleet.execute("SELECT set_config('playguard.actor', $1, true)", actor)
        await fleet.execute(MOVE_BRANCH, branch)
    rows: list[asyncpg.Record] = await fleet.fetch(
        "SELECT * FROM playguard.changes WHERE id > $1 ORDER BY id", before
    )
    return rows


async def test_an_apps_transaction_records_one_entry_naming_its_actor(
    fleet: asyncpg.Connection,
) -> None:
    async with fleet.transaction():
        await fleet.execute("SET LOCAL playguard.actor = 'alice'")
        await fleet.execute(MOVE_BRANCH, "feature/next")
    entries = await fleet.fetch(
        "SELECT * FROM playguard.changes WHERE relation = 'playguard.playgrounds' "
        "AND key = 'shop-0-1' AND operation = 'UPDATE'"
    )
    assert len(entries) == 1
    entry = entries[0]
    assert (entry["actor"], entry["columns"], entry["marquees"], entry["chain"]) == (
        "alice", ["branch"], ["edge-0"], "edge-0",
    )  # fmt: skip
    assert entry["at"] == await fleet.fetchval(
        "SELECT max(at) FROM playguard.changes WHERE chain = 'edge-0'"
    )
    assert "feature/next" not in " ".join(str(value) for value in entry.values()), (
        "a column's value is never stored"
    )


async def test_without_an_actor_the_entry_names_the_sessions_role(
    fleet: asyncpg.Connection, postgres: LabDatabase
) -> None:
    (entry,) = await _moved_by(fleet, None, "feature/role")
    assert entry["actor"] == postgres.server.user
    (entry,) = await _moved_by(fleet, "", "feature/empty")
    assert entry["actor"] == postgres.server.user, "an empty actor is no actor"


async def test_the_import_records_every_row_inserted_with_all_its_columns(
    fleet: asyncpg.Connection,
) -> None:
    inserted = await fleet.fetch(
        "SELECT relation, key, columns, chain FROM playguard.changes WHERE operation = 'INSERT'"
    )
    by_key = {(row["relation"], row["key"]): row for row in inserted}
    relations = sorted({relation for relation, _key in by_key})
    assert relations == [f"playguard.{name}" for name in (
        "agent_chats", "marquee_steering", "marquees", "playgrounds", "playspecs", "registries",
    )]  # fmt: skip
    assert len(by_key) == len(inserted), "one entry per row"
    chat = by_key[("playguard.agent_chats", "chat-1")]
    assert (chat["columns"], chat["chain"]) == (
        ["command", "image", "name", "playground", "state"], "edge-1",
    )  # fmt: skip
    assert by_key[("playguard.playspecs", "shop")]["chain"] == "*", "a playspec many use"
    steering = by_key[("playguard.marquee_steering", "edge-0")]
    assert steering["chain"] == "edge-0", "notify_marquee records too"


@pytest.mark.parametrize(
    ("actor", "stored"),
    [
        ("<script>alert(1)</script>", "<script>alert(1)</script>"),
        ("a" * 1_000_000, "a" * 200),
        ("\x1b[31mred\x07\u202edlrow\u2028x\x9b", "?[31mred??dlrow?x?"),
        ("ä\U0001f469\u200d\U0001f4bb", "ä\U0001f469?\U0001f4bb"),
    ],
    ids=["markup", "one-megabyte", "control-characters", "beyond-the-basic-plane"],
)
async def test_a_hostile_actor_is_bounded_and_inert(
    fleet: asyncpg.Connection, actor: str, stored: str
) -> None:
    (entry,) = await _moved_by(fleet, actor, f"feature/h-{secrets.token_hex(3)}")
    assert entry["actor"] == stored
    assert (await verify_changes(fleet)).intact


async def test_verify_passes_an_untouched_log(
    fleet: asyncpg.Connection, postgres: LabDatabase
) -> None:
    await _moved_by(fleet, "alice", "feature/a")
    done = playguard_with(postgres, "audit", "verify")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[-1].startswith("intact: "), done.stdout
    assert done.stdout.splitlines()[-2].startswith("no checkpoints (audit_checkpoint_file unset)")
    # The lab migrates as its daemon role, which logs in: verify says what that owner can do.
    assert done.stdout.splitlines()[-3] == (
        "the log is owned by role playguard, which logs in: it can append entries of its own "
        "making after the newest checkpoint (docs, operations/why.md: hand the log to a role "
        "nobody logs in as)"
    )


async def _tampered(fleet: asyncpg.Connection) -> int:
    """Three moves on edge-0's chain; returns the middle entry's id."""
    ids: list[int] = [
        (await _moved_by(fleet, "alice", f"feature/t-{n}"))[0]["id"] for n in range(3)
    ]
    return ids[1]


async def test_verify_names_an_entry_changed_by_a_superuser(
    fleet: asyncpg.Connection, postgres: LabDatabase
) -> None:
    changed = await _tampered(fleet)
    await fleet.execute("UPDATE playguard.changes SET actor = 'mallory' WHERE id = $1", changed)
    done = playguard_with(postgres, "audit", "verify")
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].startswith(f"changes id {changed} (chain 'edge-0', seq ")
    assert "hash mismatch: the entry was changed" in done.stdout.splitlines()[0]
    assert done.stdout.splitlines()[-1].startswith("NOT intact: ")
    assert len(done.stdout.splitlines()) == 4, done.stdout


async def test_verify_names_an_entry_deleted_as_missing(
    fleet: asyncpg.Connection, postgres: LabDatabase
) -> None:
    deleted = await _tampered(fleet)
    seq = await fleet.fetchval("SELECT seq FROM playguard.changes WHERE id = $1", deleted)
    await fleet.execute("DELETE FROM playguard.changes WHERE id = $1", deleted)
    done = playguard_with(postgres, "audit", "verify", "--json")
    assert done.returncode == 1
    found = json.loads(done.stdout)
    assert found["intact"] is False
    (problem,) = found["problems"]
    assert (problem["chain"], problem["seq"], problem["id"]) == ("edge-0", seq, None)
    assert problem["problem"].startswith(f"seq {seq} missing (after id ")


async def test_verify_bounds_its_output_when_every_entry_is_changed(
    fleet: asyncpg.Connection, postgres: LabDatabase
) -> None:
    total = await fleet.fetchval("SELECT count(*) FROM playguard.changes")
    await fleet.execute("UPDATE playguard.changes SET actor = 'mallory'")
    done = playguard_with(postgres, "audit", "verify", "--limit", "3")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert len(lines) == 7
    assert lines[3] == f"... and {total - 3} more problems"


async def test_prune_cuts_old_entries_and_the_chains_still_verify(
    fleet: asyncpg.Connection,
) -> None:
    await fleet.execute("UPDATE playguard.changes SET at = at - interval '100 days'")
    # The backdating above changed every entry: rebuild the chains as the trigger would have.
    await _rehash(fleet)
    kept = await _moved_by(fleet, "alice", "feature/after-cut")
    cut = await prune_changes(fleet, older_than=timedelta(days=90))
    assert cut["edge-0"] > 0
    remaining = await fleet.fetch("SELECT id, chain, operation, key FROM playguard.changes "
                                  "ORDER BY id")  # fmt: skip
    anchors = {row["chain"]: f"{row['seq']} {row['hash']}"
               for row in await fleet.fetch("SELECT * FROM playguard.change_anchors")}  # fmt: skip
    assert remaining[0]["id"] == kept[0]["id"]
    assert {(row["chain"], row["operation"], row["key"]) for row in remaining[1:]} == {
        (chain, "PRUNE", anchor) for chain, anchor in anchors.items()
    }, "each chain cut holds an entry naming its anchor"
    found = await verify_changes(fleet)
    assert found.intact, [p.line() for p in found.problems]
    after = await _moved_by(fleet, "bob", "feature/after-anchor")
    assert after[0]["seq"] == kept[0]["seq"] + 2, "after the prune's own entry"
    assert (await verify_changes(fleet)).intact


async def _rehash(fleet: asyncpg.Connection) -> None:
    """Each entry's hash computed again in chain order (as the trigger computes it)."""
    await fleet.execute(
        """
        DO $$
        DECLARE entry record; previous text := ''; chain_of text := NULL;
        BEGIN
            FOR entry IN SELECT * FROM playguard.changes ORDER BY chain, seq LOOP
                IF chain_of IS DISTINCT FROM entry.chain THEN previous := ''; END IF;
                chain_of := entry.chain;
                previous := encode(sha256(convert_to(previous || '|' ||
                    playguard.playguard_change_canonical_roles(entry.id, entry.at,
                        entry.relation, entry.key, entry.columns, entry.operation, entry.actor,
                        entry.marquees, entry.chain, entry.seq, entry.session_role,
                        entry.acting_role), 'UTF8')), 'hex');
                UPDATE playguard.changes SET hash = previous WHERE id = entry.id;
                UPDATE playguard.changes SET prev_hash = coalesce((SELECT c.hash FROM
                    playguard.changes c WHERE c.chain = entry.chain AND c.seq = entry.seq - 1), '')
                    WHERE id = entry.id;
            END LOOP;
        END;
        $$
        """
    )


@pytest.fixture
async def daemons_role(postgres: LabDatabase) -> AsyncIterator[asyncpg.Connection]:
    """A connection as a role that may create only in playguard's schema, which it migrated,
    in the database of a Rails-style application holding the Marquee edge-a."""
    await create_app(
        postgres, AppFleet(marquees=[{"name": "edge-a", "host": "10.0.0.1", "port": 22}])
    )
    async with limited_role(postgres) as role:
        connection = await role.database.connect()
        try:
            await migrate(connection)
            yield connection
        finally:
            await connection.close()


@asynccontextmanager
async def _app_role(
    admin: asyncpg.Connection,
    database: LabDatabase,
    *,
    server_settings: dict[str, str] | None = None,
) -> AsyncIterator[tuple[asyncpg.Connection, str]]:
    """A connection as a role of the application's (with ``server_settings``, as PGOPTIONS sets
    them) and its name: it may update ``public.marquees`` and use playguard's schema (as the
    README grants), and holds nothing on ``playguard.changes``."""
    name, password = f"app_{secrets.token_hex(5)}", secrets.token_urlsafe(12)
    await admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD {literal(password)}")
    try:
        await admin.execute(f"GRANT USAGE ON SCHEMA playguard TO {name}")
        await admin.execute(f"GRANT SELECT, UPDATE ON public.marquees TO {name}")
        url = database.url.replace(f"{database.server.user}@", f"{name}@", 1)
        connection = await asyncpg.connect(url, password=password,
                                           server_settings=server_settings)  # fmt: skip
        try:
            yield connection, name
        finally:
            await connection.close()
    finally:
        await admin.execute(f"DROP OWNED BY {name}")
        await admin.execute(f"DROP ROLE {name}")


async def test_an_app_roles_write_to_its_own_table_is_recorded_through_the_trigger(
    daemons_role: asyncpg.Connection, postgres: LabDatabase
) -> None:
    admin = await postgres.connect()
    try:
        await admin.execute(
            "CREATE TRIGGER playguard_notify AFTER INSERT OR UPDATE OR DELETE ON public.marquees "
            "FOR EACH ROW EXECUTE FUNCTION playguard.notify_marquee('name')"
        )
        async with _app_role(admin, postgres) as (app, _name):
            async with app.transaction():
                await app.execute("SET LOCAL playguard.actor = 'alice'")
                await app.execute("UPDATE public.marquees SET ssh_port = 2222, updated_at = now()")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await app.fetch("SELECT * FROM playguard.changes")
    finally:
        await admin.close()
    (entry,) = await daemons_role.fetch("SELECT * FROM playguard.changes")
    assert (entry["relation"], entry["key"], entry["columns"], entry["actor"], entry["chain"]) == (
        "public.marquees", "edge-a", ["ssh_port", "updated_at"], "alice", "edge-a",
    )  # fmt: skip
    assert (await verify_changes(daemons_role)).intact


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE playguard.changes SET actor = 'mallory'",
        "DELETE FROM playguard.changes",
        "TRUNCATE playguard.changes",
        "DELETE FROM playguard.change_anchors",
        "SELECT playguard.playguard_record_change('marquees', 'x', 'INSERT', NULL, '{}', '{}', "
        "'app')",
    ],
)
async def test_the_daemons_role_can_neither_change_nor_add_entries(
    daemons_role: asyncpg.Connection, statement: str
) -> None:
    await daemons_role.execute(
        "INSERT INTO playguard.marquee_steering (name, mode) VALUES ('edge-a', 'detect')"
    )
    before = await daemons_role.fetch("SELECT * FROM playguard.changes")
    with pytest.raises(asyncpg.PostgresError) as refused:
        await daemons_role.execute(statement)
    assert isinstance(refused.value, asyncpg.InsufficientPrivilegeError) or (
        "called by playguard's triggers only" in str(refused.value)
    ), refused.value
    assert await daemons_role.fetch("SELECT * FROM playguard.changes") == before
    assert len(before) == 1


FORGED_INSERT = """
INSERT INTO playguard.changes (at, relation, key, columns, operation, actor, marquees, chain, seq,
                               prev_hash, hash)
SELECT now(), 'playguard.marquees', 'edge-a', '{}', 'UPDATE', 'cto', '{edge-a}', chain, seq + 1,
       hash, 'forged'
FROM playguard.changes ORDER BY id DESC LIMIT 1
"""
"""An entry made up and appended by hand (its hash need not be right to be refused)."""


def _documented_hand_over(audit_role: str, daemon_role: str) -> str:
    """The docs' statements that hand the audit to a role of its own, for these roles."""
    log = section("operations/why.md", "Why did this change, in PostgreSQL: the change log")
    blocks: list[str] = re.findall(r"```\n(CREATE ROLE playguard_audit .*?)```", log, re.DOTALL)
    (block,) = blocks
    return block.replace("playguard_audit", audit_role).replace(
        " TO playguard;", f" TO {daemon_role};"
    )


async def test_after_the_documented_hand_over_the_daemons_role_cannot_get_the_audit_back(
    postgres: LabDatabase,
) -> None:
    await create_app(postgres, AppFleet())
    audit_role = f"audit_{secrets.token_hex(5)}"
    admin = await postgres.connect()
    try:
        async with limited_role(postgres, schema="granted") as daemon:
            connection = await daemon.database.connect()
            try:
                await migrate(connection)
                await admin.execute(_documented_hand_over(audit_role, daemon.name))
                await connection.execute(
                    f"GRANT UPDATE, DELETE ON playguard.changes TO {daemon.name}"
                )
                await connection.execute(
                    "INSERT INTO playguard.marquee_steering (name, mode) VALUES ('edge-a', 'off')"
                )
                for statement in (
                    "UPDATE playguard.changes SET actor = 'mallory'",
                    "DELETE FROM playguard.changes",
                    "DROP TABLE playguard.changes",
                    FORGED_INSERT,
                    "SELECT playguard.playguard_append_change('marquees', 'x', 'INSERT', '{}', "
                    "'{edge-a}', 'app')",
                ):
                    with pytest.raises(asyncpg.InsufficientPrivilegeError):
                        await connection.execute(statement)
                entries = await connection.fetch("SELECT actor, chain FROM playguard.changes")
                found = await verify_changes(connection)
                owner = await log_owner(connection)
            finally:
                await connection.close()
            await admin.execute(f"DROP OWNED BY {audit_role}")
    finally:
        await admin.execute(f"DROP ROLE IF EXISTS {audit_role}")
        await admin.close()
    assert [(row["actor"], row["chain"]) for row in entries] == [(daemon.name, "edge-a")]
    assert (found.intact, found.entries) == (True, 1)
    assert owner == LogOwner(audit_role, logs_in=False)
    assert owner.line() == f"the log is owned by role {audit_role}, which nobody logs in as"


async def test_two_writers_to_one_marquee_never_fork_its_chain(
    fleet: asyncpg.Connection, postgres: LabDatabase
) -> None:
    other = await postgres.connect()
    try:
        async with fleet.transaction():
            await fleet.execute(MOVE_BRANCH, "feature/first")
            second = asyncio.create_task(
                other.execute(
                    "UPDATE playguard.playgrounds SET branch = 'feature/second' "
                    "WHERE name = 'shop-0-2'"
                )
            )
            await _until_waiting_on_a_lock(fleet, other.get_server_pid())
        await second
    finally:
        await other.close()
    entries = await fleet.fetch(
        "SELECT key, seq FROM playguard.changes WHERE chain = 'edge-0' ORDER BY seq DESC LIMIT 2"
    )
    assert [row["key"] for row in entries] == ["shop-0-2", "shop-0-1"]
    assert entries[0]["seq"] == entries[1]["seq"] + 1
    assert (await verify_changes(fleet)).intact


async def _until_waiting_on_a_lock(observer: asyncpg.Connection, pid: int) -> None:
    async with asyncio.timeout(10):
        while not await observer.fetchval(  # noqa: ASYNC110 - another server session waits
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
        ):
            await asyncio.sleep(0.02)


async def test_a_snapshot_names_the_change_log_it_saw_and_reads_on_when_it_may_not_read_it(
    daemons_role: asyncpg.Connection, tmp_path: Path
) -> None:
    await import_inventory(daemons_role, write_inventory(tmp_path, full_document()))
    newest = await daemons_role.fetchval("SELECT max(id) FROM playguard.changes")

    seen = await read_snapshot(daemons_role)
    rows, narrow_seen = await read_marquees(daemons_role, "playguard", ["edge-0"], seen.columns)
    await daemons_role.execute("REVOKE SELECT ON playguard.changes FROM CURRENT_USER")
    unreadable = await read_snapshot(daemons_role)

    assert newest is not None
    assert (seen.last_change, narrow_seen) == ({"change": newest}, {"change": newest})
    assert [row["name"] for row in rows["marquees"]] == ["edge-0"]
    assert unreadable.last_change is None
    assert unreadable.rows == seen.rows, "the rest of the snapshot read as before"


@pytest.mark.parametrize(
    ("claim", "by_session"),
    [
        pytest.param("SET LOCAL playguard.actor = 'cto@example.com'", False, id="set-local"),
        pytest.param(None, True, id="session-option"),
    ],
)
async def test_an_actor_claimed_by_an_app_role_is_shown_beside_the_role_that_wrote(
    daemons_role: asyncpg.Connection, postgres: LabDatabase, claim: str | None, by_session: bool
) -> None:
    admin = await postgres.connect()
    try:
        await admin.execute(
            "CREATE TRIGGER playguard_notify AFTER INSERT OR UPDATE OR DELETE ON public.marquees "
            "FOR EACH ROW EXECUTE FUNCTION playguard.notify_marquee('name')"
        )
        settings = {"playguard.actor": "cto@example.com"} if by_session else None
        async with _app_role(admin, postgres, server_settings=settings) as (app, name):
            async with app.transaction():
                if claim is not None:
                    await app.execute(claim)
                await app.execute("UPDATE public.marquees SET ssh_port = 2200")
            await admin.execute(f"GRANT {name} TO {postgres.server.user}")
            async with admin.transaction():
                await admin.execute(f"SET LOCAL ROLE {name}")
                await admin.execute("UPDATE public.marquees SET ssh_port = 2201")
            entries = await read_changes(daemons_role, "playguard", "edge-a", since=0.0)
            found = await verify_changes(daemons_role)
    finally:
        await admin.close()
    claimed, set_role = entries
    assert (claimed.actor, claimed.session_role, claimed.acting_role) == (
        "cto@example.com", name, None,
    )  # fmt: skip
    assert change_event(claimed).by == f"cto@example.com (claimed) as role {name}"
    assert (set_role.session_role, set_role.acting_role) == (postgres.server.user, name)
    assert change_event(set_role).by == f"role {postgres.server.user} (acting as {name})"
    assert found.intact, [problem.line() for problem in found.problems]


@pytest.mark.parametrize("table", ["marquee_steering", "agent_chats", "marquees"])
async def test_a_truncate_of_a_table_the_daemon_reads_is_an_entry_naming_its_marquees(
    fleet: asyncpg.Connection, table: str
) -> None:
    await fleet.execute(
        "INSERT INTO playguard.marquee_steering (name, mode) VALUES ('edge-0', 'detect'), "
        "('edge-1', 'off') ON CONFLICT DO NOTHING"
    )
    before = await fleet.fetchval("SELECT max(id) FROM playguard.changes")
    await fleet.execute(f"TRUNCATE playguard.{table} CASCADE")
    entries = await fleet.fetch(
        "SELECT * FROM playguard.changes WHERE id > $1 AND operation = 'TRUNCATE' ORDER BY id",
        before,
    )
    assert f"playguard.{table}" in {entry["relation"] for entry in entries}
    (entry,) = [entry for entry in entries if entry["relation"] == f"playguard.{table}"]
    assert (entry["key"], entry["columns"], entry["chain"]) == (None, [], "*")
    assert entry["marquees"] == ["edge-0", "edge-1", "edge-2"], "the Marquees its rows concerned"
    assert (await verify_changes(fleet)).intact


async def test_an_anchor_no_prune_entry_names_is_a_cut_verify_reports(
    fleet: asyncpg.Connection,
) -> None:
    await _tampered(fleet)
    head = await fleet.fetchrow(
        "SELECT seq, hash FROM playguard.changes WHERE chain = 'edge-0' ORDER BY seq DESC "
        "OFFSET 1 LIMIT 1"
    )
    assert head is not None
    await fleet.execute(
        "INSERT INTO playguard.change_anchors (chain, seq, hash) VALUES ('edge-0', $1, $2)",
        head["seq"], head["hash"],
    )  # fmt: skip
    await fleet.execute(
        "DELETE FROM playguard.changes WHERE chain = 'edge-0' AND seq <= $1", head["seq"]
    )

    found = await verify_changes(fleet)

    assert [problem.line() for problem in found.problems] == [
        f"changes (chain 'edge-0', seq {head['seq']}): the anchor at seq {head['seq']} is named "
        "by no prune entry of the chain"
    ]


async def test_an_entry_of_before_the_roles_hashes_as_migration_0009_made_it(
    fleet: asyncpg.Connection,
) -> None:
    row = await fleet.fetchrow(
        "SELECT *, playguard.playguard_change_canonical(id, at, relation, key, columns, "
        "operation, actor, marquees, chain, seq) AS old_text FROM playguard.changes LIMIT 1"
    )
    assert row is not None
    assert row["session_role"] is not None, "a new entry has its roles"
    assert canonical({**row, "session_role": None, "acting_role": None}) == row["old_text"]
    assert canonical(row) == f"{row['old_text']}|{len(row['session_role'])}:{row['session_role']}-"
