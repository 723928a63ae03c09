"""Cycle records of a large fleet written straight into Redis as the daemon writes them, for the
web view's bench and its browser test at 1,000 Marquees (running that many hosts is not needed
to see how the pages read)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from playguard_async.coordination.client import connect_redis
from playguard_async.coordination.records import CycleRecords
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.phases.protocol import BUILTIN_PHASES

OUTCOMES_IN_TURN = (
    *(["ok"] * 12), "phase_failed", "unreachable", "unhealthy", "paused", "deadline", "locked",
)  # fmt: skip
"""Outcomes of the written cycles, in turn: mostly ``ok``, every kind of trouble now and then."""


def written_cycle(name: str, index: int, number: int) -> CycleResult:
    """Cycle ``number`` of Marquee ``index`` as the engine ends it: seven phases, an action now
    and then, a reason where the outcome has one, every fifth Marquee a dry run."""
    outcome = Outcome(OUTCOMES_IN_TURN[(index + number) % len(OUTCOMES_IN_TURN)])
    result = CycleResult(marquee=name, cycle_id=f"{index:05d}{number:07x}", outcome=outcome)
    result.fence = result.host_fence = number + 1
    result.durations = {phase: 0.01 * (1 + (index + number) % 7) for phase in BUILTIN_PHASES}
    result.actions = {phase: [] for phase in BUILTIN_PHASES}
    if number % 5 == 0:
        result.actions["reconcile_playgrounds"] = [f"compose up -d pg-{number % 3}"]
    if outcome is not Outcome.OK:
        result.phase = "reconcile_playgrounds"
        result.reason = f"ssh to {name}: connection refused"
    result.dry_run = index % 5 == 0
    result.replica = f"replica-{index % 3}"
    result.finished_at = time.time() - 60.0 * (50 - number)
    result.duration = 0.2 + (index * 7 + number * 13) % 40 / 10
    return result


async def write_fleet(url: str, names: Sequence[str], cycles: int) -> None:
    """``cycles`` records of each Marquee of ``names``, written as the daemon writes them: a
    tick's records in one pipeline (``CycleRecords.write_command``, then ``answered``)."""
    redis = connect_redis(url)
    records = CycleRecords(redis, history_length=50, timeout=30.0)
    await records.record(names[0], written_cycle(names[0], 0, 0).to_record())  # the script
    try:
        for number in range(cycles):
            for start in range(0, len(names), 1000):
                batches = {
                    name: records.pending(name, written_cycle(name, index, number).to_record())
                    for index, name in enumerate(names[start : start + 1000], start)
                }
                pipeline = redis.pipeline(transaction=False)
                for name, batch in batches.items():
                    pipeline.execute_command(*records.write_command(name, batch))
                answers = await pipeline.execute(raise_on_error=False)
                for (name, batch), answer in zip(batches.items(), answers, strict=True):
                    if records.answered(name, batch, answer) is not None:
                        raise RuntimeError(f"{name}'s record was not written: {answer}")
    finally:
        await redis.aclose()
