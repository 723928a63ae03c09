"""The PostgreSQL desired state against the lab's server: one validated snapshot per load, a bad
row taking out only the Marquees it concerns, the last snapshot kept while the server is down."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.desired_state.model import DesiredStateUnavailable, InventoryError
from playguard_async.desired_state.postgres.connection import PgAddress, password_from
from playguard_async.desired_state.postgres.source import PostgresDesiredState
from playguard_async.desired_state.source import as_remote
from playguard_async.service.connections import inventory_source
from playguard_async.settings import load_settings
from tests.support.engine import EngineHarness, ScriptedPhase
from tests.support.pg_inventory import by_name, load_yaml
from tests.support.postgres import LabDatabase


@pytest.fixture
async def source(postgres: LabDatabase) -> AsyncIterator[PostgresDesiredState]:
    source = PostgresDesiredState(
        PgAddress.parse(postgres.url), password_from(postgres.password, None), timeout=3.0
    )
    yield source
    await source.close()


def _names(items: Any) -> list[str]:
    return [item.name for item in items]


async def test_the_settings_url_selects_the_database_and_loads_the_yaml_fleet(
    fleet: asyncpg.Connection, postgres: LabDatabase, tmp_path: Path
) -> None:
    settings = load_settings(desired_state=postgres.url, desired_state_password=postgres.password)
    source = as_remote(inventory_source(settings))
    assert source is not None
    try:
        inventory = await source.load()
    finally:
        await source.close()
    assert inventory == by_name(await load_yaml(tmp_path / "inv.yaml"))
    assert source.reachable is True
    assert source.describe() == postgres.url


# (table, key, column, value written around the dropped CHECK, Marquees left out)
BAD_ROWS = [
    ("marquees", "edge-1", "host", "-oProxyCommand=sh", ["edge-1"]),
    ("marquees", "edge-2", "port", 70000, ["edge-2"]),
    ("playgrounds", "shop-1-2", "branch", "x;rm -rf /", ["edge-1"]),
    ("playgrounds", "shop-0-1", "state", "exploded", ["edge-0"]),
    ("agent_chats", "chat-2", "image", "$(id)", ["edge-2"]),
    ("playspecs", "blog", "compose_file", "../../etc/passwd", ["edge-0", "edge-1", "edge-2"]),
    ("registries", "lab", "server", "evil host", ["edge-0", "edge-1", "edge-2"]),
]


@pytest.mark.parametrize(("table", "key", "column", "value", "left_out"), BAD_ROWS)
async def test_a_bad_row_takes_out_only_the_marquees_it_concerns(
    fleet: asyncpg.Connection,
    source: PostgresDesiredState,
    table: str,
    key: str,
    column: str,
    value: object,
    left_out: list[str],
) -> None:
    await source.load()  # a good snapshot first, so that a narrow read may follow
    constraint = f"{table}_{column}_check"
    await fleet.execute(f"ALTER TABLE playguard.{table} DROP CONSTRAINT {constraint}")
    await fleet.execute(f'UPDATE playguard.{table} SET "{column}" = $1 WHERE name = $2', value, key)

    narrow = await source.load_marquees(["edge-0", "edge-1", "edge-2"])  # a wake-up's read
    with capture_logs() as logs:
        inventory = await source.load()
        again = await source.load()

    kept = sorted({"edge-0", "edge-1", "edge-2"} - set(left_out))
    assert _names(inventory.marquees) == kept
    assert narrow is not None
    assert _names(narrow.marquees) == kept, "a narrow read leaves out what a whole read does"
    assert again == inventory
    assert {p.marquee for p in inventory.playgrounds} <= set(kept)
    assert {inventory.playground_of(chat).marquee for chat in inventory.agent_chats} <= set(kept)
    refused = [entry["error"] for entry in logs if entry["event"] == "desired_state.row_refused"]
    assert refused[0].startswith(f"{table} {key!r}: column {column}: ")
    assert refused[0].endswith(f"(value {value!r})")
    assert refused[1:] == [
        f"marquees {name!r}: left out of this snapshot (a row it needs is bad)"
        for name in left_out
        if (table, key) != ("marquees", name)  # a bad Marquee row is its own line
    ]  # logged once, though loaded twice


async def test_a_fixed_row_brings_its_marquee_back_and_says_so(
    fleet: asyncpg.Connection, source: PostgresDesiredState
) -> None:
    await fleet.execute(
        "ALTER TABLE playguard.playgrounds DROP CONSTRAINT playgrounds_branch_check"
    )
    await fleet.execute("UPDATE playguard.playgrounds SET branch = '..' WHERE name = 'shop-1-0'")
    assert _names((await source.load()).marquees) == ["edge-0", "edge-2"]

    await fleet.execute("UPDATE playguard.playgrounds SET branch = 'main' WHERE name = 'shop-1-0'")
    with capture_logs() as logs:
        inventory = await source.load()

    assert _names(inventory.marquees) == ["edge-0", "edge-1", "edge-2"]
    assert [entry["event"] for entry in logs] == ["desired_state.rows_all_valid"]
    assert source.problems == []


async def test_server_down_keeps_the_last_snapshot_and_back_reads_a_fresh_one(
    fleet: asyncpg.Connection, source: PostgresDesiredState, postgres: LabDatabase
) -> None:
    before = await source.load()
    postgres.server.stop()
    try:
        with capture_logs() as down_logs:
            during = [await source.load(), await source.load()]
        assert during == [before, before]
        assert source.reachable is False
        assert source.last_error is not None
        assert postgres.password not in source.last_error
        assert [entry["event"] for entry in down_logs] == ["desired_state.unreachable"]
    finally:
        postgres.server.start()
    changer = await postgres.connect()
    try:
        await changer.execute(
            "UPDATE playguard.playgrounds SET branch = 'fresh' WHERE name = 'shop-0-0'"
        )
    finally:
        await changer.close()

    with capture_logs() as up_logs:
        after = await source.load()

    assert source.reachable is True
    assert [entry["event"] for entry in up_logs] == ["desired_state.reachable"]
    assert after.playgrounds_on("edge-0")[0].branch == "fresh"
    age = source.snapshot_age()
    assert age is not None
    assert age < 5


GROW_MARQUEES = """
INSERT INTO playguard.marquees
SELECT (jsonb_populate_record(m, jsonb_build_object('name', 'big-' || g))).*
FROM playguard.marquees m, generate_series(1, $1) g WHERE m.name = 'edge-0'
"""
"""Copies of edge-0 under new names: a snapshot grown by ``$1`` valid rows."""


async def test_an_oversized_snapshot_is_refused_unread_once_and_the_last_good_one_kept(
    fleet: asyncpg.Connection, postgres: LabDatabase, redis: Redis
) -> None:
    source = PostgresDesiredState(
        PgAddress.parse(postgres.url),
        password_from(postgres.password, None),
        timeout=3.0,
        max_bytes=20_000,
    )
    harness = EngineHarness(redis, ScriptedPhase("first"), state=source)
    try:
        before = await harness.engine.load_inventory()
        await fleet.execute(GROW_MARQUEES, 200)
        with capture_logs() as logs:
            during = [await harness.engine.load_inventory() for _ in range(3)]
            results = await harness.tick()
    finally:
        await source.close()
    assert during == [before] * 3
    assert sorted(result.marquee for result in results) == ["edge-0", "edge-1"]
    [invalid] = [line for line in logs if line["event"] == "inventory.invalid"]
    assert re.search(r"snapshot of \d+ bytes .*more than the limit of 20000", invalid["error"])
    assert source.reachable is True


async def test_an_unreachable_database_at_the_first_read_is_unavailable_not_misconfigured(
    postgres: LabDatabase,
) -> None:
    address = PgAddress.parse(postgres.url)
    source = PostgresDesiredState(
        PgAddress(address.user, address.host, address.port, address.database),
        password_from("wrong-Pa55word", None),
        timeout=3.0,
    )
    with pytest.raises(DesiredStateUnavailable) as refused:  # the engine waits it out
        await source.load()
    assert str(refused.value).startswith(f"{address.describe()}: cannot connect: ")
    assert "wrong-Pa55word" not in str(refused.value)


async def test_an_unmigrated_database_says_to_migrate(postgres: LabDatabase) -> None:
    source = PostgresDesiredState(
        PgAddress.parse(postgres.url), password_from(postgres.password, None), timeout=3.0
    )
    try:
        with pytest.raises(InventoryError, match="run `playguard db migrate`"):
            await source.load()
    finally:
        await source.close()


async def test_steering_lives_in_its_own_table_and_a_bad_row_takes_out_only_its_marquee(
    fleet: asyncpg.Connection, source: PostgresDesiredState
) -> None:
    first = await source.load()
    assert [(m.name, m.mode, m.windows is None) for m in first.marquees] == [
        ("edge-0", "apply", True), ("edge-1", "apply", False), ("edge-2", "detect", False),
    ]  # fmt: skip
    await fleet.execute(
        "INSERT INTO playguard.marquee_steering (name, mode, windows) VALUES ($1, $2, $3)"
        " ON CONFLICT (name) DO UPDATE SET mode = $2, windows = $3",
        "edge-0", "off", None,
    )  # fmt: skip
    assert (await source.load()).marquee("edge-0").mode == "off"

    six_fields = '[{"kind": "allow", "cron": "0 2 * * 6 1", "duration": 60}]'
    await fleet.execute(
        "UPDATE playguard.marquee_steering SET windows = $1 WHERE name = 'edge-1'", six_fields
    )
    with capture_logs() as logs:
        refused = await source.load()
    assert _names(refused.marquees) == ["edge-0", "edge-2"]
    [line] = [log for log in logs if log["event"] == "desired_state.row_refused"]
    assert "must have 5 fields" in str(line)


WAVE = (
    "a wave is a number of Marquees (1 to 1000000) or a percentage of the cohort ('1%' to "
    "'100%', no space)"
)

DEEP = "[" * 5000 + "]" * 5000
"""JSON that jsonb takes and Python's parser cannot (it recurses once per level)."""

# (the rollout as the row holds it, written around the dropped CHECK; the problem line after
# "playspecs 'wiki': column ", up to the value shown, cut short, when it is JSON text)
BAD_ROLLOUTS = [
    ('"10%"', "rollout: Input should be a valid dictionary or instance of RolloutPolicy "
              "(value '10%')"),
    ("[1, 2]", "rollout: Input should be a valid dictionary or instance of RolloutPolicy"),
    ("{}", "rollout.waves: Field required"),
    ('{"waves": "100%"}', "rollout.waves: Input should be a valid list (value '100%')"),
    ('{"waves": [true]}', f"rollout.waves.0: {WAVE} (value True)"),
    ('{"waves": [0]}', f"rollout.waves.0: {WAVE} (value 0)"),
    ('{"waves": [1, "0%"]}', f"rollout.waves.1: {WAVE} (value '0%')"),
    ('{"waves": ["101%"]}', f"rollout.waves.0: {WAVE} (value '101%')"),
    ('{"waves": ["10 %"]}', f"rollout.waves.0: {WAVE} (value '10 %')"),
    ('{"waves": [2.5]}', f"rollout.waves.0: {WAVE} (value 2.5)"),
    ('{"waves": [1], "bake": -1}', "rollout.bake: Input should be greater than or equal to 0 "
                                   "(value -1)"),
    ('{"waves": [1], "bake": "nan"}', "rollout.bake: Input should be a finite number "
                                      "(value 'nan')"),
    ('{"waves": [1], "wave_timeout": 0}', "rollout.wave_timeout: Input should be greater than 0 "
                                          "(value 0)"),
    ('{"waves": [1], "max_failures": 1.5}', "rollout.max_failures: Input should be a valid "
                                            "integer, got a number with a fractional part "
                                            "(value 1.5)"),
    ('{"waves": [1], "password": "hunter2"}', "rollout.password: Extra inputs are not permitted"),
    (json.dumps({"waves": list(range(1, 100_001))}),
     "rollout.waves: List should have at most 20 items after validation, not 100000"),
    (json.dumps({"waves": [1], "bake": 0, "pad": "x" * 1_000_000}),
     "rollout.pad: Extra inputs are not permitted"),
    (f'{{"waves": {DEEP}}}', "rollout: a rollout is a mapping of waves, bake, max_failures and "
                             "wave_timeout; this JSON nests too deeply to be one"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "line"), BAD_ROLLOUTS)
async def test_a_bad_rollout_takes_out_only_the_marquees_of_its_playspec_and_is_named(
    fleet: asyncpg.Connection, source: PostgresDesiredState, value: str, line: str
) -> None:
    await fleet.execute(
        "INSERT INTO playguard.playspecs (name, repo, rollout) VALUES ('wiki', 'https://x/w.git', "
        """'{"waves": [1, "50%"], "bake": 5}')"""
    )
    await fleet.execute(
        "UPDATE playguard.playgrounds SET playspec = 'wiki' WHERE name = 'shop-2-0'"
    )
    good = await source.load()
    await fleet.execute("ALTER TABLE playguard.playspecs DROP CONSTRAINT playspecs_rollout_check")
    await fleet.execute(
        "UPDATE playguard.playspecs SET rollout = $1::jsonb WHERE name = 'wiki'", value
    )

    narrow = await source.load_marquees(["edge-0", "edge-1", "edge-2"])
    with capture_logs() as logs:
        inventory = await source.load()

    [wiki] = [spec for spec in good.playspecs if spec.name == "wiki"]
    assert wiki.rollout is not None
    assert wiki.rollout.waves == [1, "50%"]
    assert _names(inventory.marquees) == ["edge-0", "edge-1"]
    assert narrow is not None
    assert _names(narrow.marquees) == ["edge-0", "edge-1"]
    assert _names(inventory.playspecs) == ["blog", "shop"]
    refused = [entry["error"] for entry in logs if entry["event"] == "desired_state.row_refused"]
    assert refused[1:] == ["marquees 'edge-2': left out of this snapshot (a row it needs is bad)"]
    assert refused[0].startswith(f"playspecs 'wiki': column {line}")
    assert refused[0] == f"playspecs 'wiki': column {line}" or len(refused[0]) < 300, "bounded"
    assert "hunter2" not in str(logs)


async def test_windows_nested_past_the_parser_take_out_only_their_marquee(
    fleet: asyncpg.Connection, source: PostgresDesiredState
) -> None:
    """An array, as 0005's CHECK asks, that Python's JSON parser cannot follow down."""
    await fleet.execute(
        "UPDATE playguard.marquee_steering SET windows = $1::jsonb WHERE name = 'edge-1'", DEEP
    )
    with capture_logs() as logs:
        inventory = await source.load()

    assert _names(inventory.marquees) == ["edge-0", "edge-2"]
    [line] = [entry["error"] for entry in logs if entry["event"] == "desired_state.row_refused"]
    assert line.startswith(
        "marquees 'edge-1': column windows: maintenance windows are a list of windows; this JSON "
        "nests too deeply to be one (value '[[[["
    )
