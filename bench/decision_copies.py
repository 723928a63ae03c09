"""What keeping the fleet's decisions outside Redis adds to an in-sync cycle's CPU.

An in-sync cycle of a Marquee with ``--playgrounds`` Playgrounds in staged scopes, whose host
copies this replica already knows (every cycle after the first of a process): the gate's look-up
of the copies, its comparison with Redis's record that the verdicts read anyway
(``RolloutDesk.recorded``), and its check that the host's is current (``kept_rollouts``,
``keep_rollouts``), the
same for the Marquee's pins (``kept_pins``, ``keep_pins``) and the pause memory's check at the
lease (``PauseMemory.forgotten`` of a Marquee never paused). None of them sends a Redis command
or a host command in that cycle; this measures the Python left, in-process, ``--cycles`` times.

    .venv/bin/python bench/decision_copies.py [--playgrounds 5] [--cycles 20000]

Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

from playguard_async.coordination.pause import PauseMemory
from playguard_async.coordination.pins import PinsRead
from playguard_async.coordination.rollouts import RolloutRead
from playguard_async.desired_state.rollout_policy import RolloutPolicy, Wave
from playguard_async.phases.decision_copies import (
    PINS_COPY,
    DecisionMemory,
    keep_pins,
    keep_rollouts,
    kept_pins,
    kept_rollouts,
    rollout_copy,
)
from playguard_async.phases.rollout_desk import RolloutDesk
from playguard_async.phases.rollout_record import Rollout
from playguard_async.remote.ssh import RemoteSession


async def measure(playgrounds: int, cycles: int) -> float:
    """CPU seconds per cycle of the added work."""
    memory = DecisionMemory()
    # Only the Marquee's name and dry_run are read once every copy is known: no host is asked.
    known = SimpleNamespace(marquee=SimpleNamespace(name="m1"), dry_run=False)
    session = cast(RemoteSession, known)
    policy = RolloutPolicy(waves=[1, "100%"])
    scopes = {f"web-{n}": f"web{n}@main" for n in range(playgrounds)}
    records = {
        playground: Rollout.open(scope, "a" * 64, None, policy, (Wave("0", 1), Wave("~", 1)),
                                 now=1e9).stored_over(None)
        for playground, scope in scopes.items()
    }  # fmt: skip
    for playground, record in records.items():
        memory.on_host["m1", rollout_copy(playground)] = record.seq
        memory.saw_rollout(record)
    pins = PinsRead.of("m1", 3, {})
    memory.on_host["m1", PINS_COPY] = pins.seq
    # The desk's reads of the scopes' records, as the verdicts make them (no Redis command more):
    # what ``kept_rollouts`` compares the copies with, their parses cached as in a cycle.
    desk = RolloutDesk(cast(Any, None), 1.0, cast(Any, None), cast(Any, None), dry_run=False,
                       reads={record.scope: RolloutRead(record.scope, record.encode(), {}, 1e9)
                              for record in records.values()})  # fmt: skip
    pauses = PauseMemory()
    redis = cast(Any, None)  # a Marquee never paused: the memory answers without Redis
    start = time.process_time()
    for _ in range(cycles):
        await kept_rollouts(session, scopes, await desk.recorded(scopes.values()), memory)
        await keep_rollouts(session, records, memory)
        await kept_pins(session, pins.seq, memory)
        await keep_pins(session, pins, memory)
        await pauses.forgotten(redis, "m1", 1.0)
    return (time.process_time() - start) / cycles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--playgrounds", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=20_000)
    args = parser.parse_args()
    per_cycle = asyncio.run(measure(args.playgrounds, args.cycles))
    print(f"{per_cycle * 1e3:.4f} ms CPU per in-sync cycle ({args.playgrounds} staged Playgrounds)")


if __name__ == "__main__":
    main()
