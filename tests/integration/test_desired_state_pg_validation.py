"""A snapshot's validation that outlives its timeout, against the lab's PostgreSQL: the thread it
ran in cannot be stopped, so the loads (ticks) after it start no other while it runs; the last
snapshot (or, before the first, no cycles) stays in force, and once it ends validation resumes."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator, MutableMapping, Sequence
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.desired_state.postgres import source as postgres
from playguard_async.desired_state.postgres.connection import PgAddress, password_from
from playguard_async.desired_state.postgres.relations import Broken, Rows
from playguard_async.desired_state.postgres.source import PostgresDesiredState
from playguard_async.desired_state.postgres.validation import RowMemo, Validated, validate_snapshot
from tests.support.engine import EngineHarness, ScriptedPhase
from tests.support.fencing import eventually
from tests.support.postgres import LabDatabase

THREAD = "desired-state-validate"


@pytest.fixture
async def source(postgres: LabDatabase) -> AsyncIterator[PostgresDesiredState]:
    source = PostgresDesiredState(
        PgAddress.parse(postgres.url),
        password_from(postgres.password, None),
        timeout=3.0,
        validate_timeout=0.2,
    )
    yield source
    await source.close()


class HeldValidation:
    """The real ``validate_snapshot``, held in its thread while ``held`` (a validation slower
    than its timeout, as a huge fleet on a starved machine is); counts the calls."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.released.set()
        self.calls = 0
        self._real = validate_snapshot

    def __call__(
        self, rows: Rows, memo: RowMemo | None = None, broken: Broken | None = None
    ) -> Validated:
        self.calls += 1
        self.released.wait(30)
        return self._real(rows, memo, broken)


@pytest.fixture
def validation(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldValidation]:
    held = HeldValidation()
    monkeypatch.setattr(postgres, "validate_snapshot", held)
    yield held
    held.released.set()  # never leave a thread waiting


def _validating_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == THREAD]


async def _until_threads_end() -> None:
    await eventually(lambda: not _validating_threads(), timeout=10, what="the thread's end")


def _events(logs: Sequence[MutableMapping[str, Any]]) -> list[str]:
    """The desired state's log lines above debug level: what an operator sees."""
    return [
        entry["event"]
        for entry in logs
        if entry["event"].startswith("desired_state.") and entry["log_level"] != "debug"
    ]


def _late_line(logs: Sequence[MutableMapping[str, Any]]) -> MutableMapping[str, Any]:
    [line] = (entry for entry in logs if entry["event"] == "desired_state.validation_late")
    return line


async def test_ticks_start_no_second_validation_while_a_late_one_runs(
    redis: Redis,
    fleet: asyncpg.Connection,
    source: PostgresDesiredState,
    validation: HeldValidation,
) -> None:
    phase = ScriptedPhase("noop")
    engine = EngineHarness(redis, phase, state=source).engine
    validation.released.clear()

    with capture_logs() as logs:
        for _ in range(4):
            assert await engine.tick() == [], "no desired state yet: no cycles"
            assert len(_validating_threads()) == 1
    assert validation.calls == 1, "one thread in flight, not one per tick"
    assert engine.inventory is None
    assert engine.waiting_for_desired_state is not None
    assert engine.waiting_for_desired_state.endswith(
        ": a snapshot read earlier is still being validated, past 0.2 s (inventory_read_timeout)"
    )
    assert _events(logs) == ["desired_state.validation_late"], "logged once"
    assert _late_line(logs)["keeping"] == "nothing"

    validation.released.set()
    await _until_threads_end()
    with capture_logs() as logs:
        started = await engine.tick()
    assert sorted(task.get_name() for task in started) == ["cycle:edge-0", "cycle:edge-1"]
    for task in started:
        await task
    assert validation.calls == 2
    assert engine.waiting_for_desired_state is None
    assert _events(logs) == ["desired_state.validation_caught_up"]
    assert sorted(phase.finished) == ["edge-0", "edge-1"]


async def test_a_late_validation_keeps_the_last_snapshot_and_the_next_is_fresh(
    fleet: asyncpg.Connection, source: PostgresDesiredState, validation: HeldValidation
) -> None:
    before = await source.load()
    await fleet.execute("UPDATE playguard.playgrounds SET branch = 'fresh' WHERE name = 'shop-0-0'")
    validation.released.clear()

    with capture_logs() as logs:
        during = [await source.load() for _ in range(3)]
    assert during == [before] * 3
    assert len(_validating_threads()) == 1
    assert validation.calls == 2, "the first load's, and one thread since"
    assert _events(logs) == ["desired_state.validation_late"]
    assert _late_line(logs)["keeping"] == "last snapshot"

    validation.released.set()
    await _until_threads_end()
    after = await source.load()
    assert after.playgrounds_on("edge-0")[0].branch == "fresh"
    assert validation.calls == 3


async def test_a_validation_that_fails_in_its_thread_does_not_block_the_next(
    fleet: asyncpg.Connection, source: PostgresDesiredState, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = validate_snapshot
    failures = [RuntimeError("a bug in validation")]

    def failing_once(
        rows: Rows, memo: RowMemo | None = None, broken: Broken | None = None
    ) -> Validated:
        if failures:
            raise failures.pop()
        return real(rows, memo, broken)

    monkeypatch.setattr(postgres, "validate_snapshot", failing_once)
    with pytest.raises(RuntimeError, match="a bug in validation"):
        await source.load()
    assert [marquee.name for marquee in (await source.load()).marquees] == [
        "edge-0",
        "edge-1",
        "edge-2",
    ]
