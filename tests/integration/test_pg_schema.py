"""The shipped migrations and ``db import`` / ``db export`` against the lab's PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from playguard_async.desired_state.model import InventoryError
from playguard_async.desired_state.postgres.connection import PgAddress, password_from
from playguard_async.desired_state.postgres.schema import (
    migrate,
    schema_version,
    shipped_migrations,
)
from playguard_async.desired_state.postgres.snapshot import read_snapshot
from playguard_async.desired_state.postgres.source import PostgresDesiredState
from playguard_async.desired_state.postgres.transfer import (
    ImportRefused,
    export_inventory,
    import_inventory,
)
from playguard_async.desired_state.postgres.validation import validate_snapshot
from tests.support.pg_inventory import by_name, full_document, load_yaml, write_inventory
from tests.support.postgres import LabDatabase, notified_by

SCHEMA_QUERY = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0
UNION ALL
SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid), true
FROM pg_constraint WHERE connamespace = $1::regnamespace
UNION ALL
SELECT proname, pg_get_function_identity_arguments(oid), '', true
FROM pg_proc WHERE pronamespace = $1::regnamespace
ORDER BY 1, 2
"""
"""Every column, constraint and function of a schema."""

# Values that would do harm if pasted into SQL or a shell anywhere on the way; each must come
# back byte for byte.
METACHARACTER_VALUES = [
    "'; DROP TABLE marquees; --",
    'a"b\\c',
    "$(touch /tmp/pwned) `id` ${HOME}",
    "x; rm -rf / #",
    "%s %(name)s {0} $1",
    "line\nbreak\ttab\r",
    "\u202eright-to-left \U0001f600",
    "-rf",
    "",
]


VERSIONS = "SELECT version, sha256, applied_at FROM playguard.schema_version"


@pytest.fixture
async def connection(postgres: LabDatabase) -> AsyncIterator[asyncpg.Connection]:
    connection = await postgres.connect()
    yield connection
    await connection.close()


async def test_migrate_twice_is_a_no_op(connection: asyncpg.Connection) -> None:
    assert await schema_version(connection) is None
    public = await connection.fetch(SCHEMA_QUERY, "public")
    applied = await migrate(connection)
    assert [m.version for m in applied] == [m.version for m in shipped_migrations()]
    schema = await connection.fetch(SCHEMA_QUERY, "playguard")
    versions = await connection.fetch(VERSIONS)

    assert await migrate(connection) == []
    assert await connection.fetch(SCHEMA_QUERY, "playguard") == schema
    assert await connection.fetch(VERSIONS) == versions
    assert await connection.fetch(SCHEMA_QUERY, "public") == public, "nothing made in public"
    assert {row[0] for row in schema} >= {"marquees", "schema_version", "notify_marquee"}
    assert await schema_version(connection) == shipped_migrations()[-1].version


async def test_concurrent_migrations_apply_each_file_once(postgres: LabDatabase) -> None:
    connections = [await postgres.connect() for _ in range(3)]
    try:
        results = await asyncio.gather(*(migrate(c) for c in connections))
    finally:
        for connection in connections:
            await connection.close()
    assert sorted(len(applied) for applied in results) == [0, 0, len(shipped_migrations())]


async def test_import_then_export_loads_back_equal(
    connection: asyncpg.Connection, tmp_path: Path
) -> None:
    await migrate(connection)
    original_path = write_inventory(tmp_path, full_document())
    original = await load_yaml(original_path)

    counts = await import_inventory(connection, original_path)
    exported = write_inventory(tmp_path, {}, "exported.yaml")
    exported.write_text(await export_inventory(connection), encoding="utf-8")

    assert counts == {"marquees": 3, "registries": 2, "playspecs": 2, "playgrounds": 9,
                      "agent_chats": 3}  # fmt: skip
    assert await load_yaml(exported) == by_name(original)


@pytest.mark.parametrize("value", METACHARACTER_VALUES)
async def test_sql_and_shell_metacharacters_stay_data(
    connection: asyncpg.Connection, tmp_path: Path, value: str
) -> None:
    await migrate(connection)
    document = full_document(1, command=[value, "--", value])
    document["marquees"][0]["user"] = value or "x"
    path = write_inventory(tmp_path, document)

    await import_inventory(connection, path)

    assert await connection.fetchval("SELECT command FROM playguard.agent_chats") == [
        value,
        "--",
        value,
    ]
    assert await connection.fetchval('SELECT "user" FROM playguard.marquees') == (value or "x")
    assert by_name(await load_yaml(path)) == await _exported(connection, tmp_path)


async def _exported(connection: asyncpg.Connection, directory: Path) -> object:
    exported = directory / "exported.yaml"
    exported.write_text(await export_inventory(connection), encoding="utf-8")
    return await load_yaml(exported)


async def test_import_names_errors_as_the_yaml_loader_and_imports_nothing(
    connection: asyncpg.Connection, tmp_path: Path
) -> None:
    await migrate(connection)
    document = full_document()
    document["playgrounds"][4]["branch"] = "a..b"
    path = write_inventory(tmp_path, document)
    with pytest.raises(InventoryError) as from_yaml:
        await load_yaml(path)

    with pytest.raises(InventoryError) as from_import:
        await import_inventory(connection, path)

    assert str(from_import.value) == str(from_yaml.value)
    assert "playgrounds[4].branch: must not contain '..'" in str(from_import.value)
    assert await connection.fetchval("SELECT count(*) FROM playguard.marquees") == 0


async def test_a_row_only_the_database_refuses_is_named_and_nothing_is_imported(
    connection: asyncpg.Connection, tmp_path: Path
) -> None:
    await migrate(connection)
    document = full_document()
    document["agent_chats"][2]["command"] = ["agent", "nul\x00byte"]
    path = write_inventory(tmp_path, document)

    with pytest.raises(ImportRefused) as refused:
        await import_inventory(connection, path)

    assert str(refused.value).startswith(f"{path}: agent_chats[2]: refused by the database: ")
    assert str(refused.value).endswith("; nothing imported")
    assert "\n" not in str(refused.value)

    for table in ("marquees", "playgrounds", "agent_chats"):
        assert await connection.fetchval(f"SELECT count(*) FROM playguard.{table}") == 0


async def test_import_into_a_database_that_has_a_fleet_needs_replace(
    connection: asyncpg.Connection, tmp_path: Path
) -> None:
    await migrate(connection)
    await import_inventory(connection, write_inventory(tmp_path, full_document(3)))
    smaller = write_inventory(tmp_path, full_document(1), "smaller.yaml")

    with pytest.raises(ImportRefused, match="table marquees is not empty"):
        await import_inventory(connection, smaller)
    assert await connection.fetchval("SELECT count(*) FROM playguard.marquees") == 3

    await import_inventory(connection, smaller, replace=True)
    assert await _exported(connection, tmp_path) == by_name(await load_yaml(smaller))


# (statement changing one row, the Marquees whose desired state it changes); run with only
# public on the search_path, as the application's sessions are: the triggers find their tables.
NOTIFYING_CHANGES = [
    ("UPDATE playguard.marquees SET port = 1 WHERE name = 'edge-1'", {"edge-1"}),
    ("UPDATE playguard.playgrounds SET branch = 'b' WHERE name = 'shop-2-0'", {"edge-2"}),
    (
        "UPDATE playguard.playgrounds SET marquee = 'edge-0' WHERE name = 'shop-1-0'",
        {"edge-0", "edge-1"},
    ),
    ("UPDATE playguard.agent_chats SET state = 'closed' WHERE name = 'chat-0'", {"edge-0"}),
    (
        "UPDATE playguard.playspecs SET images = '{}' WHERE name = 'blog'",
        {"edge-0", "edge-1", "edge-2"},
    ),
    (
        "UPDATE playguard.registries SET username = 'w' WHERE name = 'lab'",
        {"edge-0", "edge-1", "edge-2"},
    ),
    ("UPDATE playguard.registries SET username = 'w' WHERE name = 'corp'", set()),
    ("DELETE FROM playguard.agent_chats WHERE name = 'chat-1'", {"edge-1"}),
]


@pytest.mark.parametrize(("statement", "marquees"), NOTIFYING_CHANGES)
async def test_a_changed_row_notifies_the_marquees_it_concerns(
    connection: asyncpg.Connection, postgres: LabDatabase, tmp_path: Path,
    statement: str, marquees: set[str],
) -> None:  # fmt: skip
    await migrate(connection)
    await import_inventory(connection, write_inventory(tmp_path, full_document()))
    names = await notified_by(postgres, connection, statement)
    assert names == marquees


PLAYSPEC_HEALTH_REFUSED = {
    "unknown-policy": ("rollback", "sometimes"),
    "empty-policy": ("rollback", ""),
    "zero-timeout": ("health_timeout", 0.0),
    "negative-timeout": ("health_timeout", -1.0),
    "timeout-past-an-hour": ("health_timeout", 3600.5),
    "nan-timeout": ("health_timeout", float("nan")),
    "infinite-timeout": ("health_timeout", float("inf")),
}
"""Values of the Playspec's health fields the model refuses: migration 0006 refuses them too
(NaN and infinity compare above any bound in PostgreSQL)."""


@pytest.mark.parametrize("case", sorted(PLAYSPEC_HEALTH_REFUSED))
async def test_playspec_health_fields_the_model_refuses_the_database_refuses(
    connection: asyncpg.Connection, case: str
) -> None:
    await migrate(connection)
    column, value = PLAYSPEC_HEALTH_REFUSED[case]
    with pytest.raises(asyncpg.CheckViolationError):
        await connection.execute(
            f"INSERT INTO playguard.playspecs (name, repo, {column}) "
            "VALUES ('web', 'https://x/web.git', $1)",
            value,
        )


async def test_playspec_without_health_fields_reads_the_models_defaults(
    connection: asyncpg.Connection,
) -> None:
    await migrate(connection)
    await connection.execute(
        "INSERT INTO playguard.playspecs (name, repo) VALUES ('web', 'https://x/w.git')"
    )
    row = await connection.fetchrow("SELECT rollback, health_timeout FROM playguard.playspecs")
    assert row is not None
    assert dict(row) == {"rollback": "notify", "health_timeout": 60.0}


PLAYSPECS_VIEW = """
ALTER TABLE playguard.playspecs RENAME TO app_specs;
CREATE VIEW playguard.playspecs AS
SELECT name, repo, compose_file, images, registry FROM playguard.app_specs;
"""
"""A view over the application's rows written before the health fields existed."""


async def test_a_playspecs_view_without_the_health_fields_reads_their_defaults_and_0006_spares_it(
    connection: asyncpg.Connection,
) -> None:
    await migrate(connection)
    await connection.execute(
        "INSERT INTO playguard.playspecs (name, repo, rollback, health_timeout) "
        "VALUES ('web', 'https://x/w.git', 'auto', 5)"
    )
    await connection.execute(PLAYSPECS_VIEW)
    # As if the view had been made before 0006 was shipped: 0006 runs against it.
    await connection.execute("DELETE FROM playguard.schema_version WHERE version = 6")

    applied = await migrate(connection)
    snapshot = await read_snapshot(connection)
    [playspec] = validate_snapshot(snapshot.rows, broken=snapshot.broken).inventory.playspecs

    assert [migration.version for migration in applied] == [6]
    assert snapshot.broken == {}
    assert (playspec.rollback, playspec.health_timeout) == ("notify", 60.0)


async def test_playspec_health_fields_import_and_export_back_equal(
    connection: asyncpg.Connection, tmp_path: Path
) -> None:
    await migrate(connection)
    document = full_document()
    document["playspecs"][0].update(rollback="auto", health_timeout=12.5)
    original = await load_yaml(write_inventory(tmp_path, document))

    await import_inventory(connection, write_inventory(tmp_path, document))
    exported = write_inventory(tmp_path, {}, "exported.yaml")
    exported.write_text(await export_inventory(connection), encoding="utf-8")

    back = await load_yaml(exported)
    assert back == by_name(original)
    assert (back.playspecs[1].rollback, back.playspecs[1].health_timeout) == ("auto", 12.5)


ROLLOUT = {"waves": [1, "10%", "100%"], "bake": 30.5, "max_failures": 2, "wave_timeout": 600}


async def test_a_rollout_and_a_canary_import_read_and_export_back_equal(
    connection: asyncpg.Connection, tmp_path: Path
) -> None:
    await migrate(connection)
    document = full_document()
    document["playspecs"][0]["rollout"] = ROLLOUT
    document["marquees"][1]["canary"] = True
    original = await load_yaml(write_inventory(tmp_path, document))

    await import_inventory(connection, write_inventory(tmp_path, document))
    stored = await connection.fetchval(
        "SELECT rollout FROM playguard.playspecs WHERE name = 'shop'"
    )
    canaries = await connection.fetch("SELECT name FROM playguard.marquee_steering WHERE canary")
    snapshot = await read_snapshot(connection)
    read = validate_snapshot(snapshot.rows, broken=snapshot.broken)
    exported = write_inventory(tmp_path, {}, "exported.yaml")
    exported.write_text(await export_inventory(connection), encoding="utf-8")

    assert json.loads(stored) == ROLLOUT, "a jsonb object, as written"
    assert [row["name"] for row in canaries] == ["edge-1"]
    assert read.problems == []
    assert read.inventory == by_name(original)
    assert read.inventory.playspecs[1].rollout == original.playspecs[0].rollout
    assert [m.name for m in read.inventory.marquees if m.canary] == ["edge-1"]
    assert await load_yaml(exported) == by_name(original)


SET_ROLLOUT = "UPDATE playguard.playspecs SET rollout = $1::jsonb"


@pytest.mark.parametrize(
    ("statement", "value", "refusal"),
    [
        (SET_ROLLOUT, "[1, 2]", asyncpg.CheckViolationError),
        (SET_ROLLOUT, '"10%"', asyncpg.CheckViolationError),
        (SET_ROLLOUT, "7", asyncpg.CheckViolationError),
        ("UPDATE playguard.marquee_steering SET canary = $1::boolean", None,
         asyncpg.NotNullViolationError),
    ],
)  # fmt: skip
async def test_a_rollout_that_is_no_json_object_and_a_null_canary_the_database_refuses(
    fleet: asyncpg.Connection, statement: str, value: str | None, refusal: type[Exception]
) -> None:
    with pytest.raises(refusal):
        await fleet.execute(statement, value)


BEFORE_0008 = """
ALTER TABLE playguard.playspecs RENAME TO app_specs;
CREATE VIEW playguard.playspecs AS
SELECT name, repo, compose_file, images, registry, rollback, health_timeout
FROM playguard.app_specs;
ALTER TABLE playguard.marquee_steering DROP COLUMN canary;
DELETE FROM playguard.schema_version WHERE version = 8;
"""
"""As if a view over the application's playspecs had been written, and the schema left, before
0008 was shipped."""


async def test_a_schema_before_0008_reads_no_rollout_and_no_canary_and_0008_spares_the_view(
    fleet: asyncpg.Connection, postgres: LabDatabase
) -> None:
    await fleet.execute(BEFORE_0008)
    source = PostgresDesiredState(
        PgAddress.parse(postgres.url), password_from(postgres.password, None), timeout=3.0
    )
    try:
        before = await source.load()
        assert list(source.problems) == []
        assert [spec.rollout for spec in before.playspecs] == [None, None]
        assert [m.canary for m in before.marquees] == [False, False, False]

        applied = await migrate(fleet)
        await fleet.execute("UPDATE playguard.marquee_steering SET canary = true "
                            "WHERE name = 'edge-2'")  # fmt: skip
        # The whole snapshot before read marquee_steering without canary: a wake-up's narrow
        # read does not answer with what it did not read; the next whole read does.
        assert await source.load_marquees(["edge-2"]) is None
        after = await source.load()
    finally:
        await source.close()
    assert [migration.version for migration in applied] == [8]
    kind = "SELECT relkind::text FROM pg_class WHERE oid = 'playguard.playspecs'::regclass"
    assert await fleet.fetchval(kind) == "v", "still the view"
    assert list(source.problems) == []
    assert [spec.rollout for spec in after.playspecs] == [None, None]
    assert [m.name for m in after.marquees if m.canary] == ["edge-2"]


async def test_a_canary_imported_into_a_schema_before_0008_is_refused_with_the_way_out(
    fleet: asyncpg.Connection, tmp_path: Path
) -> None:
    await fleet.execute("ALTER TABLE playguard.marquee_steering DROP COLUMN canary")
    path = write_inventory(tmp_path, full_document(2))
    await import_inventory(fleet, path, replace=True)  # no canary: what the table holds suffices
    document = full_document()
    document["marquees"][1]["canary"] = True
    path = write_inventory(tmp_path, document)

    with pytest.raises(ImportRefused) as refused:
        await import_inventory(fleet, path, replace=True)

    assert str(refused.value) == (
        f"{path}: marquees[1].canary: the table has no column canary (run `playguard db "
        "migrate`); nothing imported"
    )
    assert await fleet.fetchval("SELECT count(*) FROM playguard.marquees") == 2
