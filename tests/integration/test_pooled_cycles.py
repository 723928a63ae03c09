"""Whole cycles of the real engine through the daemon's remote layer (``wiring.RemoteLayer``):
the SSH connection and compose's answers outlive a cycle, the session and its lease do not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiodocker
import pytest
from redis.asyncio import Redis

from playguard_async.engine.results import Outcome
from playguard_async.phases.protocol import resolve_phases
from playguard_async.service.wiring import RemoteLayer
from playguard_async.settings.sections import DEFAULT_PHASES
from playguard_lab import GitOrigin
from tests.support.engine import EngineHarness, settings_for
from tests.support.playgrounds import project_containers, use_own_branch
from tests.support.world import LabWorld

pytestmark = pytest.mark.integration

SETTINGS: dict[str, Any] = {
    "replica_id": "pooled",
    "lock_ttl": 120.0,
    "redis_socket_timeout": 2.0,
    "compose_command": ["docker-compose"],
    "stuck_after": 2.0,
    "orphan_grace": 0.0,
}


@pytest.fixture
async def remote() -> AsyncIterator[RemoteLayer]:
    layer = RemoteLayer(settings_for(**SETTINGS))
    try:
        yield layer
    finally:
        await layer.close()


async def test_cycles_share_a_connection_and_each_writes_under_its_own_fence(
    redis: Redis,
    lab_world: LabWorld,
    git_origin: GitOrigin,
    busybox_image: str,
    lab_docker: aiodocker.Docker,
    remote: RemoteLayer,
) -> None:
    use_own_branch(lab_world, git_origin, busybox_image)
    cycles = EngineHarness(
        redis,
        *resolve_phases(DEFAULT_PHASES),
        state=lab_world,
        open_session=remote.session_opener(),
        **SETTINGS,
    )

    first = await cycles.cycle()
    second = await cycles.cycle()
    converged = await cycles.cycle()
    [app] = await project_containers(lab_docker)
    await lab_docker.containers.container(app["Id"]).kill()
    third = await cycles.cycle()

    assert [r.outcome for r in (first, second, converged, third)] == [Outcome.OK] * 4
    assert first.host_fence == first.fence
    # The first cycle keeps compose's answers for the containers its `up` left on the host
    # (bookkeeping through the fence guard, no action); after that, nothing is written.
    assert not any(second.actions.values())
    assert second.host_fence is None
    assert not any(converged.actions.values())
    assert converged.host_fence is None  # converged: nothing written
    assert first.fence is not None
    assert third.fence is not None
    assert third.fence > first.fence
    assert third.host_fence == third.fence
    assert any(a.startswith("compose up") for a in third.actions["reconcile_playgrounds"])
    assert remote.pool.connects == 1
    assert remote.pool.idle() == 1
    assert len(remote.compose_memo) == 1

    await remote.close()
    assert remote.pool.idle() == 0
