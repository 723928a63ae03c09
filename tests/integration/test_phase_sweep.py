"""sweep_orphans against the lab's dockerd: orphans with our labels removed after their grace,
everything else left alone."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiodocker
import pytest

from playguard_async.phases.sweep_orphans import sweep_orphans
from playguard_async.remote.docker import our_labels
from tests.support.edge import LabEdge
from tests.support.world import LAB_OPTIONS

pytestmark = pytest.mark.integration

StartContainer = Callable[[str, dict[str, str]], Awaitable[str]]
"""``await start(name, labels) -> name``: a running busybox container on the lab's dockerd."""


@pytest.fixture
async def start_container(edge: LabEdge) -> AsyncIterator[StartContainer]:
    """Starts containers under names unique to the test; removes them all afterwards, labelled
    or not (lab_docker only removes the labelled ones)."""
    suffix = uuid.uuid4().hex[:8]
    started: list[str] = []

    async def start(name: str, labels: dict[str, str]) -> str:
        unique = f"{name}-{suffix}"
        config: dict[str, Any] = {
            "Image": edge.image,
            "Cmd": ["sleep", "3600"],
            "Labels": labels,
            "HostConfig": {"NetworkMode": "none"},
        }
        await edge.docker.containers.run(config, name=unique)
        started.append(unique)
        return unique

    yield start
    for name in started:
        with contextlib.suppress(aiodocker.DockerError):
            await edge.docker.containers.container(name).delete(force=True)


async def exists(docker: aiodocker.Docker, name: str) -> bool:
    try:
        await docker.containers.container(name).show()
    except aiodocker.DockerError as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def test_orphans_with_our_labels_are_removed_and_nothing_else(
    edge: LabEdge,
    start_container: StartContainer,
) -> None:
    orphan = await start_container("pg-ghost_app_1", our_labels("edge-1", playground="ghost"))
    orphan_chat = await start_container(
        "pg-chat-gone", our_labels("edge-1", playground="web-main", agent_chat="gone")
    )
    lookalike = await start_container("pg-ghost_app_2", {"io.playguard.playground": "ghost"})
    wanted = await start_container("pg-web-main_app_1", our_labels("edge-1", playground="web-main"))
    wanted_chat = await start_container(
        "pg-chat-chat-1", our_labels("edge-1", playground="web-main", agent_chat="chat-1")
    )
    other_marquee = await start_container("pg-far_app_1", our_labels("edge-2", playground="far"))

    run = await edge.run(sweep_orphans)

    ages_cut = sorted(action.rsplit(", ", 1)[0] for action in run.actions)
    assert ages_cut == sorted(
        [
            f"remove orphan container {orphan} of playground ghost",
            f"remove orphan container {orphan_chat} of agent chat gone",
        ]
    )
    assert run.report.findings == {"removed": sorted([orphan, orphan_chat]), "in_grace": []}
    assert not await exists(edge.docker, orphan)
    assert not await exists(edge.docker, orphan_chat)
    for kept in (lookalike, wanted, wanted_chat, other_marquee):
        assert await exists(edge.docker, kept), kept
    assert (await edge.run(sweep_orphans)).actions == []


async def test_orphan_younger_than_the_grace_is_kept(
    edge: LabEdge,
    start_container: StartContainer,
) -> None:
    orphan = await start_container("pg-ghost_app_1", our_labels("edge-1", playground="ghost"))

    run = await edge.run(sweep_orphans, options=dataclasses.replace(LAB_OPTIONS, orphan_grace=3600))

    assert run.actions == []
    assert run.report.findings == {"removed": [], "in_grace": [orphan]}
    assert await exists(edge.docker, orphan)


async def test_dry_run_reports_would_and_removes_nothing(
    edge: LabEdge,
    start_container: StartContainer,
) -> None:
    orphan = await start_container("pg-ghost_app_1", our_labels("edge-1", playground="ghost"))

    run = await edge.run(sweep_orphans, dry_run=True)

    [action] = run.actions
    assert action.startswith(f"would remove orphan container {orphan} of playground ghost, ")
    assert await exists(edge.docker, orphan)
