"""An operator's rollout action is on the hosts of its scope before the command reports it
(``operator.rollout_hosts``): Redis forgetting everything right after it, a replica that never
read the decision learns it from the first host it cycles. On the lab of ``test_rollouts``: six
Marquees on the lab's sshd and dockerd, the CLI as an operator runs it, real cycles."""

from __future__ import annotations

import copy
import json
import socket

import pytest

from playguard_async.coordination.keys import marquee_lock_name
from playguard_async.coordination.lock import TokenLock
from playguard_async.phases.decision_copies import MEMORY
from tests.integration.test_rollouts import (
    CANARY,
    MARQUEES,
    TWO_REPLICAS,
    Fleet,
    converged_first,
    fleet,
    members,
)
from tests.support.cli import EXIT_NOT_OK, Playguard

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

__all__ = ["fleet"]  # the fixture, shared with test_rollouts


async def canary_baking(fleet: Fleet, head: str) -> None:
    async def baking() -> bool:
        record = await fleet.record()
        return record is not None and record.commit == head and record.healthy_at is not None

    await fleet.until(baking, TWO_REPLICAS, ticks=10)


def acted(playguard: Playguard, action: str, fleet: Fleet, rollout_id: str) -> dict[str, object]:
    done = playguard("rollout", action, fleet.scope, "--rollout", rollout_id, "--reason",
                     f"{action} for the test", "--json")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    shown: dict[str, object] = json.loads(done.stdout)
    return shown


async def forget_everything(fleet: Fleet) -> None:
    """FLUSHALL, then a replica that never read the decision: this process's memory gone, as
    a fresh process's (the fence counters lifted as the engine lifts them after the first
    refusal)."""
    await fleet.redis.flushall()
    await fleet.fences_caught_up()
    MEMORY.forget()


async def test_an_abort_is_on_every_host_before_the_command_reports_and_outlives_flushall(
    fleet: Fleet, playguard: Playguard
) -> None:
    fleet.world.data["playspecs"][0]["rollout"]["bake"] = 3600  # only an operator moves it on
    playguard.configure(fleet.world.data)
    await converged_first(fleet)
    head = fleet.release(healthy=True, message="a release aborted in wave 2")
    await canary_baking(fleet, head)
    record = await fleet.record()
    assert record is not None
    acted(playguard, "promote", fleet, record.id)
    second = members(record, 1)

    async def second_wave_moved() -> bool:
        return all(fleet.updates(name) for name in second)

    await fleet.until(second_wave_moved, TWO_REPLICAS, ticks=10)
    copies = {name: fleet.copies(name) for name in MARQUEES}
    shown = acted(playguard, "abort", fleet, record.id)
    await forget_everything(fleet)  # no cycle read the abort
    for _ in range(3):
        await fleet.tick(TWO_REPLICAS)

    rebuilt = await fleet.record()
    assert rebuilt is not None
    assert (rebuilt.id, rebuilt.status) == (record.id, "aborted")
    assert {name: fleet.checkout_commit(name) for name in MARQUEES} == dict.fromkeys(
        MARQUEES, fleet.first
    )
    assert shown["on_every_host"] is True
    assert [(h["marquee"], h["carries"]) for h in shown["hosts"]] == [  # type: ignore[attr-defined]
        (name, True) for name in MARQUEES
    ]
    assert all(fleet.copies(name) > copies[name] for name in MARQUEES)


async def test_a_pause_is_on_every_host_and_no_wave_starts_after_flushall(
    fleet: Fleet, playguard: Playguard
) -> None:
    playguard.configure(fleet.world.data)
    await converged_first(fleet)
    head = fleet.release(healthy=True, message="a release paused in wave 1")
    await canary_baking(fleet, head)
    record = await fleet.record()
    assert record is not None
    shown = acted(playguard, "pause", fleet, record.id)
    await forget_everything(fleet)
    for _ in range(4):  # each past the bake: a running rollout would start wave 2
        await fleet.tick(TWO_REPLICAS)

    rebuilt = await fleet.record()
    assert rebuilt is not None
    assert (rebuilt.id, rebuilt.status, rebuilt.wave) == (record.id, "paused", 0)
    assert [name for name in MARQUEES if name != CANARY and fleet.updates(name)] == []
    assert shown["on_every_host"] is True


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_hosts_an_abort_did_not_reach_are_named_and_the_exit_status_says_so(
    fleet: Fleet, playguard: Playguard
) -> None:
    """One host cannot be reached, one Marquee's lock is held by a cycle: both are named, the
    rest carry the abort, the record in Redis stands, exit status 4."""
    fleet.world.data["playspecs"][0]["rollout"]["bake"] = 3600
    await converged_first(fleet)
    head = fleet.release(healthy=True, message="a release aborted with a host away")
    await canary_baking(fleet, head)
    record = await fleet.record()
    assert record is not None
    away, locked = MARQUEES[0], MARQUEES[1]
    data = copy.deepcopy(fleet.world.data)
    [entry] = [m for m in data["marquees"] if m["name"] == away]
    entry["port"] = closed_port()
    playguard.configure(data)
    lease = await TokenLock(fleet.redis, marquee_lock_name(locked), ttl=60.0).acquire()
    assert lease is not None
    try:
        done = playguard("rollout", "abort", fleet.scope, "--rollout", record.id,
                         "--reason", "bad graphs")  # fmt: skip
        as_json = playguard("rollout", "abort", fleet.scope, "--rollout", record.id,
                            "--reason", "again")  # fmt: skip
    finally:
        await lease.release()

    assert done.returncode == EXIT_NOT_OK, done.stdout + done.stderr
    assert f"{fleet.scope}: aborted" in done.stdout
    assert f"on the hosts: {len(MARQUEES) - 2} of {len(MARQUEES)} Marquees carry it" in done.stdout
    assert f"  {away}: not yet: unreachable: " in done.stdout
    assert f"  {locked}: not yet: locked by replica " in done.stdout
    assert "that cycle reads the decision from Redis" in done.stdout
    assert as_json.returncode == 1, "aborted already: nothing more to store"
    stored = await fleet.record()
    assert stored is not None
    assert stored.status == "aborted"
