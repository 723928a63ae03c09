"""Outside input an adversary controls, against the lab's real Redis and the real ``playguard``
command and engine: Redis values this project did not write, rich markup and terminal escapes in
data, inventories broken while the daemon runs, cycles failing outside any phase, Redis going
silent while a cycle is recorded."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import fence_key, last_cycle_key, lock_key, marquee_lock_name
from playguard_async.coordination.lock import ReleaseResult, TokenLock
from playguard_async.coordination.lock_state import inspect_lock
from playguard_async.coordination.records import CycleRecords
from playguard_async.desired_state.model import SHOWN_PROBLEMS
from playguard_async.desired_state.yaml_source import YamlInventorySource
from playguard_async.engine.cycle import Cycle
from playguard_async.engine.observer import Unobserved
from playguard_async.engine.results import Outcome
from playguard_async.engine.scheduler import Engine
from playguard_async.engine.services import CycleServices
from playguard_lab import RedisServer
from tests.support.cli import EXIT_LOCKED, Playguard, assert_one_line_error, hold_lock
from tests.support.daemon import DaemonRunner, marquee_entry
from tests.support.engine import ScriptedPhase, inventory_of, settings_for
from tests.support.hostile import HOSTILE

pytestmark = pytest.mark.integration

M1_LOCK = lock_key(marquee_lock_name("m1"))

FOREIGN_LOCK_VALUES: list[bytes] = [
    b"plain string",
    b"",
    b"\xff\xfe not utf-8",
    b"[/x] [bold]markup[/bold]",
    b"\x1b[2J\x1b[31mred",
    b'{"token": "t"}',
    b'{"token": 1, "replica": "r", "host": "h", "pid": "7", "acquired_at": "x"}',
    b'{"token": "t", "replica": "[/x]", "host": "h", "pid": true, "acquired_at": "x"}',
    b"[" * 5000 + b"]" * 5000,
    b"x" * 100_000,
    b"null",
]

FOREIGN_CYCLE_RECORDS: list[bytes] = [
    b"not json",
    b"{}",
    b'{"outcome": "ok"}',
    b'{"cycle": "c", "outcome": "ok", "finished_at": "yesterday", "duration": 1}',
    b'{"cycle": "c", "outcome": "ok", "finished_at": NaN, "duration": Infinity}',
    b'{"cycle": "c", "outcome": "ok", "finished_at": 1e300, "duration": -1}',
    b'{"cycle": "c", "outcome": "[/x]", "finished_at": 1, "duration": 1, "findings": 3}',
    b'{"cycle": 1, "outcome": ["ok"], "finished_at": 1, "duration": 1}',
    b'{"cycle": "c", "outcome": "ok", "finished_at": 1, "duration": 1, "notices": {"p": 3}}',
    b'{"cycle": "c", "outcome": "ok", "finished_at": 1, "duration": 1, "notices": {"p": '
    b'[{"kind": "[/x]", "subject": "s", "detail": "d"}]}}',
    b"[1, 2]",
    b"[" * 5000 + b"]" * 5000,
]


def configure(playguard: Playguard, count: int) -> list[str]:
    names = [f"m{index}" for index in range(count)]
    playguard.configure({"marquees": [marquee_entry(name) for name in names]})
    return names


@pytest.fixture
def playguard(daemons: DaemonRunner) -> Playguard:
    return Playguard(daemons)


def assert_clean(done: Any, *codes: int) -> None:
    """Exited with one of ``codes``, no traceback, no raw escape reached the terminal."""
    output = done.stdout + done.stderr
    assert done.returncode in codes, output
    assert "Traceback" not in output, output
    assert "\x1b" not in output, output


def lock_of(name: str) -> str:
    return lock_key(marquee_lock_name(name))


def test_foreign_lock_values_read_as_unknown_and_force_unlock_removes_exactly_them(
    playguard: Playguard, store: SyncRedis
) -> None:
    names = configure(playguard, len(FOREIGN_LOCK_VALUES))
    for name, value in zip(names, FOREIGN_LOCK_VALUES, strict=True):
        store.set(lock_of(name), value, px=600_000)
        store.set(fence_key(marquee_lock_name(name)), b"not a number")
    commands = (("status",), ("status", "--json"), ("locks",), ("locks", "--json"))
    shown = {args: playguard(*args) for args in commands}
    for done in shown.values():
        assert_clean(done, 0)
    locks = json.loads(shown[("locks", "--json")].stdout)["locks"]
    assert [(lock["name"], lock["known"], lock["fence"]) for lock in locks] == [
        (marquee_lock_name(name), False, None) for name in sorted(names)
    ]
    assert shown[("locks",)].stdout.count("unknown record") == len(names)

    for name in names:  # a cycle finds the Marquee held, as by any other holder
        held = playguard("cycle", name)
        assert_clean(held, EXIT_LOCKED)
        assert held.stderr.startswith(f"Error: {name} is locked by an unknown record "), held.stderr
        assert held.stdout == "", "no phase ran"
    refused = playguard("unlock", names[0])
    assert_clean(refused, 1)
    assert "unknown record" in refused.stdout
    assert store.get(lock_of(names[0])) == FOREIGN_LOCK_VALUES[0], "nothing deleted unforced"
    for name in names:
        assert_clean(playguard("unlock", name, "--force"), 0)
        assert store.exists(lock_of(name)) == 0, name


def test_force_unlock_of_a_foreign_value_leaves_a_value_written_meanwhile(
    playguard: Playguard, store: SyncRedis
) -> None:
    async def compare() -> ReleaseResult:
        redis = Redis.from_url(playguard.runner.redis_url)
        try:
            lock = TokenLock(redis, marquee_lock_name("m1"))
            found = await inspect_lock(redis, lock.name, timeout=lock.timeout)
            assert found is not None
            store.set(M1_LOCK, b"written meanwhile", px=60_000)
            return await lock.compare_and_delete(found.record)
        finally:
            await redis.aclose()

    store.set(M1_LOCK, b"\xff foreign", px=60_000)
    assert asyncio.run(compare()) is ReleaseResult.STOLEN
    assert store.get(M1_LOCK) == b"written meanwhile"


def test_foreign_cycle_records_read_as_unknown(playguard: Playguard, store: SyncRedis) -> None:
    names = configure(playguard, len(FOREIGN_CYCLE_RECORDS))
    for name, record in zip(names, FOREIGN_CYCLE_RECORDS, strict=True):
        store.set(last_cycle_key(name), record)
    shown = {args: playguard(*args) for args in (("status",), ("status", "--json"))}
    for done in shown.values():
        assert_clean(done, 0)
    marquees = json.loads(shown[("status", "--json")].stdout)["marquees"]
    assert {m["last"]["outcome"] for m in marquees} <= {"unknown", "ok", "[/x]"}
    assert [m["last"]["outcome"] for m in marquees].count("unknown") >= 8


MARKUP = ["[/x]", "[bold]", "[/]", ":smile:", "[link=file:///etc/passwd]x[/link]", "\x1b[2J"]


def test_markup_and_escapes_in_redis_data_are_printed_as_data(
    playguard: Playguard, live_redis_server: RedisServer
) -> None:
    names = configure(playguard, len(MARKUP))
    for name, text in zip(names, MARKUP, strict=True):
        hold_lock(live_redis_server.url, name, replica=f"replica {text}")
    for args in (("status",), ("locks",)):
        done = playguard(*args)
        assert_clean(done, 0)
        for text in MARKUP[:-1]:
            assert f"replica {text}" in done.stdout, done.stdout
        assert "replica \\x1b[2J" in done.stdout
    for name in names:
        assert_clean(playguard("unlock", name), 1)
        assert_clean(playguard("cycle", name), 3)


@pytest.mark.parametrize("text", MARKUP)
def test_markup_in_an_inventory_error_and_in_arguments_is_printed_as_data(
    playguard: Playguard, text: str
) -> None:
    configure(playguard, 1)
    assert_clean(playguard("cycle", text), 1)
    playguard.runner.inventory.write_text(
        json.dumps({"marquees": [{**marquee_entry("m1"), "user": text, text: 1}]})
    )
    for args in (("status",), ("cycle", "m0")):
        assert_one_line_error(playguard(*args), str(playguard.runner.inventory))
    check = playguard("check", "--timeout", "2")
    assert_clean(check, 1)
    assert re.search(r"^ *inventory +FAIL ", check.stdout, re.MULTILINE), check.stdout


def test_check_of_an_inventory_with_10000_errors_shows_the_first_and_counts_the_rest(
    playguard: Playguard,
) -> None:
    playguard.configure({"marquees": [marquee_entry(f"M{index}") for index in range(10_000)]})
    check = playguard("check", "--timeout", "2", timeout=30.0)
    assert_clean(check, 1)
    shown = re.findall(r"marquees\[\d+\]\.name: must be", check.stdout)
    assert len(shown) == SHOWN_PROBLEMS, check.stdout
    assert f"... and {10_000 - SHOWN_PROBLEMS} more errors" in check.stdout, check.stdout


# -- the engine --------------------------------------------------------------------------------


async def test_a_running_engine_survives_every_hostile_inventory_edit(
    redis: Redis, tmp_path: Path
) -> None:
    path = tmp_path / "inventory.yaml"
    good = json.dumps({"marquees": [marquee_entry("m1")]})
    phase = ScriptedPhase("first")
    engine = Engine(CycleServices.build(settings_for(), redis, [phase]), YamlInventorySource(path))
    for name, document in HOSTILE.items():
        path.write_text(good, encoding="utf-8")  # a good read between: each refusal is news
        await engine.load_inventory()
        path.write_bytes(document)
        with capture_logs() as logs:
            await engine.load_inventory()  # a tick may go on before a slow read ends
            results = await asyncio.gather(*await engine.tick())
        assert [result.outcome for result in results] == [Outcome.OK], name
        [invalid] = [line for line in logs if line["event"] == "inventory.invalid"]
        assert invalid["error"].startswith(str(path)), name
    assert phase.entered == ["m1"] * len(HOSTILE)


class BrokenObserver(Unobserved):
    """An observer with a bug: the engine must still end the cycle with a classified outcome."""

    def lease_released(self, result: ReleaseResult) -> None:
        raise RuntimeError("observer bug\nspanning lines")


async def test_a_failure_outside_any_phase_ends_the_cycle_as_error_never_as_a_lost_task(
    redis: Redis,
) -> None:
    services = CycleServices.build(
        settings_for(), redis, [ScriptedPhase("first")], observer=BrokenObserver()
    )
    engine = Engine(services, YamlInventorySource(Path("/nonexistent")))
    inventory = inventory_of("m1")
    with capture_logs() as logs:
        result = await Cycle(engine.services, inventory.marquee("m1"), inventory).run()
    assert (result.outcome, result.reason) == (
        Outcome.ERROR,
        "RuntimeError: observer bug spanning lines",
    )
    finished = [line for line in logs if line["event"] == "cycle.finished"]
    assert [line["outcome"] for line in finished] == ["error"]
    assert await redis.exists(M1_LOCK) == 0, "the lease was released before the observer failed"


async def test_a_record_redis_does_not_take_is_one_line_and_written_with_the_next(
    redis: Redis, redis_server: RedisServer
) -> None:
    records = CycleRecords(redis, history_length=5, timeout=0.3)

    async def record(result: Any) -> None:
        await records.record(result.marquee, result.to_record())

    async def pause(ctx: Any) -> None:
        if pause.first:  # type: ignore[attr-defined]
            pause.first = False  # type: ignore[attr-defined]
            redis_server.pause()

    pause.first = True  # type: ignore[attr-defined]
    services = CycleServices.build(
        settings_for(), redis, [ScriptedPhase("first", pause)], listeners=[record]
    )
    engine = Engine(services, YamlInventorySource(Path("/nonexistent")))
    inventory = inventory_of("m1")
    try:
        with capture_logs() as logs:
            lost = await Cycle(engine.services, inventory.marquee("m1"), inventory).run()
    finally:
        redis_server.resume()
    assert lost.outcome is Outcome.LOCK_LOST
    [failed] = [line for line in logs if line["event"] == "cycle.listener_failed"]
    assert failed["error"] == "TimeoutError"
    assert "exc_info" not in failed
    assert records.unwritten("m1") == 1

    # Nor could the release reach Redis; let its key expire now instead of after lock_ttl.
    await redis.delete(M1_LOCK)
    ok = await Cycle(engine.services, inventory.marquee("m1"), inventory).run()
    assert ok.outcome is Outcome.OK
    assert records.unwritten("m1") == 0
    history = await records.history("m1")
    assert [entry["cycle"] for entry in history] == [ok.cycle_id, lost.cycle_id]
