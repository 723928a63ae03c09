"""Whole engine cycles whose writes the Marquee itself fences: the lab's real redis-server and sshd.

A refused write ends the cycle ``lock_lost``/``fenced``, no later phase runs, the lease is still
released, a metric counts it, and a Redis whose fence counter went back (FLUSHALL) heals by itself
within two cycles without the host ever accepting a write from an older fence.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import fence_key, lock_key, marquee_lock_name
from playguard_async.desired_state.model import Marquee
from playguard_async.engine.results import Outcome
from playguard_lab import DockerDaemon, SshServer
from tests.support.fencing import Fleet, host_fence, journal
from tests.support.world import lab_marquee_fields

pytestmark = pytest.mark.integration


@pytest.fixture
def marquee(ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path) -> Marquee:
    return Marquee.model_validate(lab_marquee_fields(ssh_server, docker_daemon, tmp_path / "w"))


@pytest.fixture
def state(marquee: Marquee) -> Path:
    assert marquee.state_dir is not None
    return Path(marquee.state_dir)


def recorded(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


async def test_a_write_the_host_refuses_ends_the_cycle_fenced_and_lifts_the_counter(
    redis: Redis, marquee: Marquee, state: Path, tmp_path: Path
) -> None:
    state.mkdir(mode=0o700)
    (state / "fence").write_text("50\n")
    (state / "journal").write_text("")
    fleet = Fleet(redis, marquee, tmp_path)

    with capture_logs() as logs:
        refused = await fleet.cycle()

    assert (refused.outcome, refused.reason, refused.phase) == (
        Outcome.LOCK_LOST,
        "fenced",
        "first",
    )
    assert (refused.fence, refused.host_fence) == (1, 50)
    assert fleet.second.entered == 0, "no phase runs after a refusal"
    assert recorded(fleet.record) == []
    assert await redis.exists(lock_key(marquee_lock_name(marquee.name))) == 0
    assert fleet.fenced_losses() == 1
    [line] = [line for line in logs if line["event"] == "lock.fenced"]
    assert (line["fence"], line["host_fence"]) == (1, 50)
    assert await redis.get(fence_key(marquee_lock_name(marquee.name))) == b"50"

    healed = await fleet.cycle()
    assert (healed.outcome, healed.fence, healed.host_fence) == (Outcome.OK, 51, 51)
    assert recorded(fleet.record) == [51, 51]
    assert host_fence(state) == 51


async def test_fleet_heals_within_two_cycles_after_flushall_and_no_stale_write_lands(
    redis: Redis, marquee: Marquee, state: Path, tmp_path: Path
) -> None:
    fleet = Fleet(redis, marquee, tmp_path)
    for _ in range(3):
        assert (await fleet.cycle()).outcome is Outcome.OK
    assert host_fence(state) == 3

    await redis.flushall()
    after = [await fleet.cycle(), await fleet.cycle()]
    # The counter restarts at 1: below the host's 3, refused; lifted to 3, the next lease has 4.

    assert [(r.outcome, r.reason, r.fence) for r in after] == [
        (Outcome.LOCK_LOST, "fenced", 1),
        (Outcome.OK, None, 4),
    ]
    fences = [entry.fence for entry in journal(state)]
    assert fences == sorted(fences) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert recorded(fleet.record) == fences


async def test_a_fence_counter_that_is_not_a_number_restarts_and_heals_from_the_host(
    redis: Redis, marquee: Marquee, state: Path, tmp_path: Path
) -> None:
    fleet = Fleet(redis, marquee, tmp_path)
    assert (await fleet.cycle()).outcome is Outcome.OK
    assert (await fleet.cycle()).outcome is Outcome.OK
    await redis.set(fence_key(marquee_lock_name(marquee.name)), "garbage")

    restarted = await fleet.cycle()
    assert (restarted.fence, restarted.reason, restarted.host_fence) == (1, "fenced", 2)
    healed = await fleet.cycle()
    assert (healed.outcome, healed.fence) == (Outcome.OK, 3)
    fences = [entry.fence for entry in journal(state)]
    assert fences == [1, 1, 2, 2, 3, 3]
