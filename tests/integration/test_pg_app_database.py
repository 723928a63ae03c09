"""playguard inside a Rails-style application's database on the lab's PostgreSQL, as a role
that may create only in playguard's schema: ``db migrate`` leaves ``public`` byte for byte as it
was, an install of the releases that used ``public`` is moved with its rows, and the app's rows
are read in place through views, each bad mapping isolated to the Marquees it concerns."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import asyncpg
import pytest

from playguard_async.cycle_record import CycleRecord, playground_findings
from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.postgres.connection import PgAddress, password_from
from playguard_async.desired_state.postgres.observed_state import ObservedStateWriter
from playguard_async.desired_state.postgres.schema import (
    SCHEMA_VERSION_TABLE,
    migrate,
    shipped_migrations,
)
from playguard_async.desired_state.postgres.source import PostgresDesiredState
from playguard_async.desired_state.postgres.transfer import export_inventory, import_inventory
from tests.support.app_database import (
    AGENT_CHATS_VIEW,
    PLAYGROUNDS_VIEW,
    AppFleet,
    LimitedRole,
    create_app,
    dump_public,
    limited_role,
    mapping_sql,
    sorted_names,
)
from tests.support.cli import assert_one_line_error
from tests.support.docs import code_blocks, section
from tests.support.pg_inventory import by_name, full_document, load_yaml, write_inventory
from tests.support.postgres import LabDatabase, notified_by, playguard_with

ALL_MIGRATIONS = ", ".join(f"{m.version:04d}_{m.name}" for m in shipped_migrations())
LATEST = shipped_migrations()[-1].version


def _fleet() -> AppFleet:
    """edge-a (playground pg-a with chat chat-a), edge-b (pg-b, chat chat-b), edge-c (pg-c, no
    chat), edge-d (no playground)."""
    access = {"user": "deploy", "identity_file": "/etc/playguard/id", "workdir": "/srv/pg",
              "known_hosts": "/etc/playguard/known_hosts"}  # fmt: skip
    return AppFleet(
        marquees=[
            {"name": f"edge-{x}", "host": f"10.0.0.{i}", "port": 22, **access}
            for i, x in enumerate("abcd", 1)
        ],
        playgrounds=[
            {"name": f"pg-{x}", "marquee": f"edge-{x}", "playspec": "shop", "branch": "main"}
            for x in "abc"
        ],
        agent_chats=[
            {
                "name": f"chat-{x}",
                "playground": f"pg-{x}",
                "image": "agent:1",
                "command": ["agent", x],
            }
            for x in "ab"
        ],
    )


PLAYGUARD_OWN = {
    "registries": [{"name": "lab", "server": "127.0.0.1:5000", "username": "u",
                    "password_env": "REG_PW"}],
    "playspecs": [{"name": "shop", "repo": "https://git.example.com/shop.git",
                   "images": ["shop:1"], "registry": "lab"}],
}  # fmt: skip
"""What the application does not keep: playguard's own tables, imported from YAML."""


async def test_migrate_as_a_role_limited_to_its_schema_leaves_public_byte_for_byte(
    postgres: LabDatabase,
) -> None:
    await create_app(postgres, _fleet())
    for schema in ("owned", "granted"):
        async with limited_role(postgres, schema=schema) as role:
            await _assert_limited(postgres, role)
            before = dump_public(postgres)  # with the DBA's grants to the role
            first = playguard_with(role.database, "db", "migrate")
            again = playguard_with(role.database, "db", "migrate")
            assert (first.returncode, first.stderr) == (0, ""), schema
            assert first.stdout == f"applied {ALL_MIGRATIONS}; schema playguard version {LATEST}\n"
            assert again.stdout == f"schema playguard up to date (version {LATEST})\n"
            assert dump_public(postgres) == before, f"public changed (schema {schema})"
    assert "CREATE TABLE public.schema_migrations" in before
    assert "20240215093000" in before


async def _assert_limited(admin: LabDatabase, role: LimitedRole) -> None:
    connection = await admin.connect()
    try:
        limits = await connection.fetchrow(
            "SELECT rolsuper, has_database_privilege($1, current_database(), 'CREATE') AS db,"
            " has_schema_privilege($1, 'public', 'CREATE') AS public FROM pg_roles "
            "WHERE rolname = $1",
            role.name,
        )
    finally:
        await connection.close()
    assert tuple(limits) == (False, False, False)


async def test_migrate_without_the_schema_says_what_the_dba_must_run(
    postgres: LabDatabase,
) -> None:
    await create_app(postgres, _fleet())
    async with limited_role(postgres, schema=None) as role:
        done = playguard_with(role.database, "db", "migrate")
    assert_one_line_error(done, "schema playguard does not exist and this role may not create it")
    assert 'CREATE SCHEMA "playguard" AUTHORIZATION <this role>' in done.stderr


async def _migrate_as_released_before(connection: asyncpg.Connection) -> None:
    """What ``db migrate`` of the releases before the own schema did: 0001-0003 and
    ``schema_version`` with whatever the session's search_path named first (public)."""
    async with connection.transaction():
        await connection.execute("SET LOCAL search_path TO public")
        await connection.execute(SCHEMA_VERSION_TABLE)  # unqualified, as then
        for migration in shipped_migrations()[:3]:
            await connection.execute(migration.sql)
            await connection.execute(
                "INSERT INTO schema_version (version, name, sha256) VALUES ($1, $2, $3)",
                migration.version, migration.name, migration.sha256,
            )  # fmt: skip


async def _write_back_as_released_before(
    connection: asyncpg.Connection, record: CycleRecord
) -> None:
    """The rows the write-back of those releases left in public, in 0003's columns (today's
    writer names columns later migrations add, so it cannot stand in for it)."""
    finished = datetime.fromtimestamp(record["finished_at"], UTC)
    await connection.execute(
        "INSERT INTO public.marquee_status VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10,"
        " $11)",
        record["marquee"], record["outcome"], record["reason"], record["phase"], record["fence"],
        record["replica"], record["cycle"], json.dumps(record["durations"]),
        sum(len(taken) for taken in record["actions"].values()), record["duration"], finished,
    )  # fmt: skip
    for name, found in playground_findings(record["findings"]).items():
        await connection.execute(
            "INSERT INTO public.playground_status VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7)",
            name, record["marquee"], found.state, json.dumps(list(found.drift)),
            found.actions[-1] if found.actions else None, record["cycle"], finished,
        )  # fmt: skip


STATUS_RECORD: CycleRecord = {
    "marquee": "edge-0", "outcome": "ok", "reason": None, "phase": None, "fence": 7,
    "host_fence": None, "trace": None, "cycle": "c-1", "durations": {"sync_git": 0.5},
    "actions": {"sync_git": ["pulled"]}, "duration": 1.5, "finished_at": 1_700_000_000.0,
    "findings": {"reconcile": {"playgrounds": {"shop-0-1": {"state": "running",
                                                            "drift": ["image"],
                                                            "actions": ["recreated"]}}}},
    "notices": {}, "replica": "r0", "dry_run": False, "waited": 0.0, "desired": {"change": 3},
}  # fmt: skip


def status_record(**changes: Any) -> CycleRecord:
    """``STATUS_RECORD`` with some fields changed."""
    return cast(CycleRecord, {**STATUS_RECORD, **changes})


async def test_an_install_in_public_is_moved_with_every_row_and_the_write_back(
    postgres: LabDatabase, tmp_path: Path
) -> None:
    inventory = write_inventory(tmp_path, full_document(steered=False))  # no 0005 then
    address, password = PgAddress.parse(postgres.url), password_from(postgres.password, None)
    connection = await postgres.connect()
    try:
        await _migrate_as_released_before(connection)
        await import_inventory(connection, inventory, schema="public")
        await _write_back_as_released_before(connection, STATUS_RECORD)
        versions = await connection.fetch("SELECT * FROM public.schema_version ORDER BY 1")

        applied = await migrate(connection)

        # 4 moves the released tables out of public; every later migration follows it.
        assert [m.version for m in applied] == [m.version for m in shipped_migrations()[3:]]
        assert await connection.fetch("SELECT * FROM playguard.schema_version WHERE version < 4"
                                      " ORDER BY 1") == versions  # fmt: skip
        left_in_public = await connection.fetch(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace UNION ALL "
            "SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
        )
        assert left_in_public == []
        exported = write_inventory(tmp_path, {}, "exported.yaml")
        exported.write_text(await export_inventory(connection), encoding="utf-8")
        assert await load_yaml(exported) == by_name(await load_yaml(inventory))
        kept = await connection.fetchrow("SELECT * FROM playguard.marquee_status")
        assert (kept["marquee"], kept["fence"], kept["replica"]) == ("edge-0", 7, "r0")

        writer = ObservedStateWriter(address, password, replica="r1", timeout=5)
        writer.record(status_record(fence=8, cycle="c-2"))
        await writer.close()
        assert writer.failures == 0
        rows = await connection.fetch(
            "SELECT marquee, fence, replica FROM playguard.marquee_status"
        )
        assert [tuple(row) for row in rows] == [("edge-0", 8, "r1")]
        drift = await connection.fetchval("SELECT drift FROM playguard.playground_status")
        assert json.loads(drift) == ["image"]
        assert await migrate(connection) == []
    finally:
        await connection.close()


async def test_an_apps_own_schema_version_table_is_left_where_it_is(
    postgres: LabDatabase,
) -> None:
    connection = await postgres.connect()
    try:
        await connection.execute("CREATE TABLE public.schema_version (version integer)")
        await connection.execute("INSERT INTO public.schema_version VALUES (42)")
        await migrate(connection)
        assert await connection.fetchval("SELECT version FROM public.schema_version") == 42
        assert await connection.fetchval("SELECT max(version) FROM playguard.schema_version") == (
            LATEST
        )
    finally:
        await connection.close()


@pytest.fixture
async def mapped(postgres: LabDatabase, tmp_path: Path) -> AsyncIterator[LimitedRole]:
    """The Rails-style app with ``_fleet()``'s rows, playguard migrated as the limited role,
    registries and playspecs imported into its tables, and the app-kept relations mapped as
    views (created by the limited role, as the README's guide does it)."""
    await create_app(postgres, _fleet())
    async with limited_role(postgres) as role:
        connection = await role.database.connect()
        try:
            await migrate(connection)
            await import_inventory(connection, write_inventory(tmp_path, PLAYGUARD_OWN))
            await connection.execute(mapping_sql(_fleet()))
        finally:
            await connection.close()
        yield role


@pytest.fixture
async def source(mapped: LimitedRole) -> AsyncIterator[PostgresDesiredState]:
    database = mapped.database
    source = PostgresDesiredState(
        PgAddress.parse(database.url), password_from(database.password, None), timeout=5.0
    )
    yield source
    await source.close()


async def test_the_apps_rows_are_read_in_place_through_views(
    postgres: LabDatabase, source: PostgresDesiredState
) -> None:
    inventory = await source.load()
    assert sorted_names(inventory.marquees) == ["edge-a", "edge-b", "edge-c", "edge-d"]
    assert inventory.marquee("edge-b").host == "10.0.0.2"
    assert [p.name for p in inventory.playgrounds_on("edge-c")] == ["pg-c"]
    assert inventory.agent_chats_on("edge-a")[0].command == ["agent", "a"]
    assert not source.problems

    admin = await postgres.connect()
    try:
        await admin.execute(
            "UPDATE public.playgrounds SET branch = 'feature/x' WHERE name = 'pg-b'"
        )
    finally:
        await admin.close()
    assert (await source.load()).playgrounds_on("edge-b")[0].branch == "feature/x", "no copy"


# (name, the view's new definition, the Marquees left in the snapshot, a problem line expected)
BAD_MAPPINGS = [
    ("column missing",
     AGENT_CHATS_VIEW.replace("c.image, ", ""),
     ["edge-c", "edge-d"], "playguard.agent_chats: column image missing"),
    ("wrong type",
     PLAYGROUNDS_VIEW.replace("p.branch,", "length(p.branch) AS branch,"),
     ["edge-d"], "playguard.playgrounds: column branch has type integer, expected text"),
    ("timestamp without time zone",
     PLAYGROUNDS_VIEW.replace(" AT TIME ZONE 'UTC'", ""),
     ["edge-d"], "playguard.playgrounds: column expires_at has type timestamp without time zone"),
    ("NULL name",
     PLAYGROUNDS_VIEW.replace("SELECT p.name,", "SELECT nullif(p.name, 'pg-b') AS name,"),
     ["edge-a", "edge-c", "edge-d"], "playgrounds None: column name: "),
    ("repeated name from a bad join",
     PLAYGROUNDS_VIEW.replace(
         "JOIN public.marquees m ON m.id = p.marquee_id",
         "JOIN public.marquees m ON m.id = p.marquee_id "
         "LEFT JOIN public.agent_chats c ON c.playground_id = p.id "
         "LEFT JOIN (VALUES (1), (2)) AS twice(n) ON p.name = 'pg-a'"),
     ["edge-b", "edge-c", "edge-d"],
     "playgrounds 'pg-a': 2 rows have this name (a join in the view repeats it?)"),
    ("reference to a name no row has",
     PLAYGROUNDS_VIEW.replace("p.spec AS playspec", "p.spec || p.id AS playspec"),
     ["edge-d"], "playgrounds 'pg-a': column playspec: no row of playspecs has the name 'shop1'"),
    ("error when read",
     AGENT_CHATS_VIEW.replace("c.image,", "CASE WHEN c.name = 'chat-b' THEN (1 / 0)::text "
                              "ELSE c.image END AS image,"),
     ["edge-c", "edge-d"],
     "playguard.agent_chats: cannot be read: DivisionByZeroError: division by zero"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("view", "left", "problem"),
    [case[1:] for case in BAD_MAPPINGS],
    ids=[c[0] for c in BAD_MAPPINGS],
)
async def test_a_bad_mapping_takes_out_only_the_marquees_it_concerns(
    mapped: LimitedRole, source: PostgresDesiredState, view: str, left: list[str], problem: str
) -> None:
    assert len((await source.load()).marquees) == 4
    connection = await mapped.database.connect()
    try:
        relation = view.split("CREATE VIEW ", 1)[1].split(" ", 1)[0]
        async with connection.transaction():
            await connection.execute(f"DROP VIEW {relation}")
            await connection.execute(view)

        everyone = ["edge-a", "edge-b", "edge-c", "edge-d"]
        narrow = await source.load_marquees(everyone)  # by the columns of the last good read
        inventory = await source.load()
        narrow_after = await source.load_marquees(everyone)
        shares: list[tuple[set[str], Inventory]] = []
        for share in ({"edge-a", "edge-c"}, {"edge-b", "edge-d"}):
            source.set_share(share.__contains__)
            shares.append((share, await source.load()))
        source.set_share(None)
        assert sorted_names((await source.load()).marquees) == left  # problems: the whole's
        checked = playguard_with(mapped.database, "db", "check")
    finally:
        await connection.close()

    assert sorted_names(inventory.marquees) == left
    # A read for a share holds what the whole read holds of that share, and lists the rest.
    for share, held in shares:
        assert sorted_names(held.marquees) == sorted(share & set(left))
        listed = [m.name for m in held.listed()]
        assert listed == sorted((share & set(left)) | (set(everyone) - share))
    # A narrow read gives up (None: the caller reads whole) or agrees with the whole read.
    for read in (narrow, narrow_after):
        assert read is None or sorted_names(read.marquees) == left
    assert source.reachable is True
    assert any(line.startswith(problem) for line in source.problems), source.problems
    assert all("\n" not in line for line in source.problems)
    assert checked.returncode == 1
    assert any(line.startswith(problem) for line in checked.stdout.splitlines()), checked.stdout
    assert "Traceback" not in checked.stdout + checked.stderr


async def test_a_mapping_whose_keys_cannot_be_read_keeps_the_last_snapshot(
    mapped: LimitedRole, source: PostgresDesiredState
) -> None:
    before = await source.load()
    connection = await mapped.database.connect()
    try:
        async with connection.transaction():
            await connection.execute("DROP VIEW playguard.playgrounds")
            await connection.execute(
                PLAYGROUNDS_VIEW.replace("m.name AS marquee", "m.name AS host")
            )
        assert await source.load() is before
        checked = playguard_with(mapped.database, "db", "check")
    finally:
        await connection.close()
    assert source.reachable is False
    assert source.last_error is not None
    assert source.last_error.startswith("playguard.playgrounds: column marquee missing; which "
                                        "Marquees its rows concern cannot be read")  # fmt: skip
    assert checked.returncode == 1
    assert checked.stdout.splitlines()[0] == "playguard.playgrounds: column marquee missing"


async def test_db_check_on_a_good_mapping_names_what_it_read(mapped: LimitedRole) -> None:
    checked = playguard_with(mapped.database, "db", "check")
    assert (checked.returncode, checked.stderr) == (0, "")
    assert checked.stdout == (
        "ok: playguard.marquees (view, 4 rows), playguard.registries (table, 1 rows), "
        "playguard.playspecs (table, 1 rows), playguard.playgrounds (view, 3 rows), "
        "playguard.agent_chats (view, 2 rows); every row valid\n"
    )


async def test_export_reads_the_views_and_import_refuses_to_write_them(
    mapped: LimitedRole, tmp_path: Path
) -> None:
    exported = playguard_with(mapped.database, "db", "export", "-o", str(tmp_path / "out.yaml"))
    imported = playguard_with(
        mapped.database, "db", "import", "--replace", str(tmp_path / "out.yaml")
    )

    assert (exported.returncode, exported.stderr) == (0, "")
    inventory = await load_yaml(tmp_path / "out.yaml")
    assert sorted_names(inventory.marquees) == ["edge-a", "edge-b", "edge-c", "edge-d"]
    assert sorted_names(inventory.agent_chats) == ["chat-a", "chat-b"]
    assert_one_line_error(imported, f"{tmp_path / 'out.yaml'}: nothing imported: playguard holds")
    assert "no table agent_chats, marquees, playgrounds" in imported.stderr


# (statement as the application writes its own rows, the Marquees woken)
APP_WRITES = [
    ("UPDATE public.playgrounds SET branch = 'b' WHERE name = 'pg-b'", {"edge-b"}),
    ("UPDATE public.playgrounds SET marquee_id = (SELECT id FROM public.marquees "
     "WHERE name = 'edge-d') WHERE name = 'pg-a'", {"edge-a", "edge-d"}),
    ("UPDATE public.marquees SET ssh_port = 2222 WHERE name = 'edge-c'", {"edge-c"}),
    ("UPDATE public.agent_chats SET closed = true WHERE name = 'chat-a'", {"edge-a"}),
    ("DELETE FROM public.agent_chats WHERE name = 'chat-b'", {"edge-b"}),
    ("TRUNCATE public.agent_chats", {"edge-a", "edge-b"}),
]  # fmt: skip


PRINTED_TRIGGERS = [
    ("public.marquees", "name", None),
    ("public.playgrounds", "marquee_id",
     "SELECT name FROM public.marquees WHERE id = ANY ($1::bigint[])"),
    ("public.agent_chats", "playground_id",
     "SELECT m.name FROM public.marquees m JOIN public.playgrounds p ON p.marquee_id = m.id "
     "WHERE p.id = ANY ($1::bigint[])"),
]  # fmt: skip


def _printed_triggers(role: LimitedRole) -> str:
    """What ``playguard db triggers`` prints for the app's three tables, for the owner to run."""
    statements = []
    for table, column, lookup in PRINTED_TRIGGERS:
        done = playguard_with(
            role.database,
            "db",
            "triggers",
            table,
            column,
            *(["--lookup", lookup] if lookup else []),
        )
        assert (done.returncode, done.stderr) == (0, "")
        statements.append(done.stdout)
    return "".join(statements)


@pytest.mark.parametrize(("statement", "marquees"), APP_WRITES)
async def test_the_apps_own_writes_notify_the_marquees_they_concern(
    postgres: LabDatabase, mapped: LimitedRole, statement: str, marquees: set[str]
) -> None:
    admin = await postgres.connect()
    try:
        await admin.execute(_printed_triggers(mapped))
        names = await notified_by(mapped.database, admin, statement)
    finally:
        await admin.close()
    assert names == marquees


async def test_a_failing_lookup_warns_and_never_fails_the_apps_write(
    postgres: LabDatabase, mapped: LimitedRole
) -> None:
    admin = await postgres.connect()
    warnings: list[str] = []
    admin.add_log_listener(lambda _connection, message: warnings.append(str(message)))
    try:
        await admin.execute(
            "CREATE TRIGGER playguard_notify AFTER UPDATE ON public.playgrounds FOR EACH ROW "
            "EXECUTE FUNCTION playguard.notify_marquee('marquee_id', 'SELECT 1 / 0')"
        )
        await admin.execute("UPDATE public.playgrounds SET branch = 'c' WHERE name = 'pg-c'")
        branch = await admin.fetchval("SELECT branch FROM public.playgrounds WHERE name = 'pg-c'")
    finally:
        await admin.close()
    assert branch == "c"
    assert any("lookup failed: division by zero" in warning for warning in warnings), warnings


def _guide_sql() -> list[str]:
    """The SQL blocks of the PostgreSQL guide's "Plugging into your application's database", in
    order: privileges, the view mapping, the triggers, the observed-state queries."""
    guide = section("getting-started/postgresql.md", "Plugging into your application's database")
    return code_blocks(guide, "sql")


async def test_the_guides_mapping_triggers_and_queries_run_as_written(
    postgres: LabDatabase, tmp_path: Path
) -> None:
    """The privileges block names the role ``playguard`` (the lab's superuser here): the
    limited role is made the same way by ``limited_role``; the rest runs as printed."""
    privileges, mapping, triggers, queries = _guide_sql()
    assert "GRANT SELECT ON public.marquees, public.playgrounds, public.agent_chats" in privileges
    await create_app(postgres, _fleet())
    async with limited_role(postgres) as role:
        connection = await role.database.connect()
        try:
            await migrate(connection)
            await import_inventory(connection, write_inventory(tmp_path, PLAYGUARD_OWN))
            await connection.execute(mapping)
        finally:
            await connection.close()
        address, password = (
            PgAddress.parse(role.database.url),
            password_from(role.database.password, None),
        )
        source = PostgresDesiredState(address, password, timeout=5.0)
        try:
            inventory = await source.load()
        finally:
            await source.close()
        writer = ObservedStateWriter(address, password, replica="r1", timeout=5)
        writer.record(status_record(marquee="edge-a", findings={}))
        await writer.close()

        admin = await postgres.connect()
        try:
            await admin.execute(triggers)
            woken = await notified_by(
                role.database,
                admin,
                "UPDATE public.playgrounds SET branch = 'x' WHERE name = 'pg-b'",
            )
            shown = [await admin.fetch(query) for query in queries.split(";") if query.strip()]
        finally:
            await admin.close()

    assert sorted_names(inventory.marquees) == ["edge-a", "edge-b", "edge-c", "edge-d"]
    assert str(inventory.marquee("edge-a").identity_file) == "/etc/playguard/id_ed25519"
    assert [p.state for p in inventory.playgrounds] == ["running"] * 3
    assert woken == {"edge-b"}
    by_marquee = {row["name"]: row for row in shown[0]}
    assert (by_marquee["edge-a"]["outcome"], by_marquee["edge-b"]["outcome"]) == ("ok", None)
    assert len(shown[1]) == 3, "one row per application playground"
