"""process_agent_chats against the lab's dockerd: containers started, finished chats recorded and
left alone, closed chats recorded and removed."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import aiodocker
import pytest

from playguard_async.phases.process_agent_chats import process_agent_chats
from playguard_async.phases.protocol import PartialFailure
from playguard_async.remote.docker import our_labels
from playguard_lab import DockerDaemon, LabCommandFailed, RegistryServer, push_image
from tests.support.world import LAB_OPTIONS, LabWorld, PhaseRunner

pytestmark = pytest.mark.integration

CONTAINER = "pg-chat-chat-1"
START = f"start agent chat container {CONTAINER}"
REMOVE = f"remove agent chat container {CONTAINER}"


def set_chat(world: LabWorld, **fields: Any) -> None:
    world.data["agent_chats"][0].update(fields)


async def inspect(docker: aiodocker.Docker, name: str) -> dict[str, Any] | None:
    try:
        return await docker.containers.container(name).show()
    except aiodocker.DockerError as exc:
        if exc.status == 404:
            return None
        raise


async def wait_exited(docker: aiodocker.Docker, name: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        details = await inspect(docker, name)
        assert details is not None, f"{name} is gone"
        if details["State"]["Status"] == "exited":
            return details
        assert time.monotonic() < deadline, f"{name} still {details['State']['Status']}"
        await asyncio.sleep(0.05)


async def test_fresh_chat_gets_a_running_labelled_container_then_nothing_to_do(
    lab_world: LabWorld, run_phase: PhaseRunner, lab_docker: aiodocker.Docker
) -> None:
    first = await run_phase(process_agent_chats, lab_world)
    second = await run_phase(process_agent_chats, lab_world)

    assert first.actions == [START]
    assert first.report.findings["chats"] == {"chat-1": {"state": "started"}}
    details = await inspect(lab_docker, CONTAINER)
    assert details is not None
    assert details["State"]["Running"]
    expected = our_labels("edge-1", playground="web-main", agent_chat="chat-1")
    assert expected.items() <= details["Config"]["Labels"].items()
    assert details["HostConfig"]["NetworkMode"] == LAB_OPTIONS.agent_chat_network
    assert second.actions == []
    assert second.report.findings["chats"] == {"chat-1": {"state": "running"}}


async def test_exited_chat_is_reported_with_status_and_logs_and_not_restarted(
    lab_world: LabWorld, run_phase: PhaseRunner, lab_docker: aiodocker.Docker
) -> None:
    set_chat(lab_world, command=["sh", "-c", "echo done; exit 3"])
    await run_phase(process_agent_chats, lab_world)
    exited = await wait_exited(lab_docker, CONTAINER)

    run = await run_phase(process_agent_chats, lab_world)

    assert run.actions == []
    assert run.report.findings["chats"]["chat-1"] == {
        "state": "finished",
        "container_state": "exited",
        "exit_status": 3,
        "log_tail": ["done"],
    }
    after = await inspect(lab_docker, CONTAINER)
    assert after is not None
    assert after["State"]["Status"] == "exited"
    assert after["State"]["StartedAt"] == exited["State"]["StartedAt"]


async def test_closed_chat_is_recorded_then_removed(
    lab_world: LabWorld, run_phase: PhaseRunner, lab_docker: aiodocker.Docker
) -> None:
    set_chat(lab_world, command=["sh", "-c", "echo bye; exit 5"])
    await run_phase(process_agent_chats, lab_world)
    await wait_exited(lab_docker, CONTAINER)
    set_chat(lab_world, state="closed")

    closed = await run_phase(process_agent_chats, lab_world)
    again = await run_phase(process_agent_chats, lab_world)

    assert closed.actions == [REMOVE]
    assert closed.report.findings["chats"]["chat-1"] == {
        "state": "removed",
        "container_state": "exited",
        "exit_status": 5,
        "log_tail": ["bye"],
    }
    assert await inspect(lab_docker, CONTAINER) is None
    assert again.actions == []
    assert again.report.findings["chats"] == {}


async def test_closed_chat_still_running_is_removed(
    lab_world: LabWorld, run_phase: PhaseRunner, lab_docker: aiodocker.Docker
) -> None:
    await run_phase(process_agent_chats, lab_world)
    set_chat(lab_world, state="closed")

    closed = await run_phase(process_agent_chats, lab_world)

    assert closed.actions == [REMOVE]
    ending = closed.report.findings["chats"]["chat-1"]
    assert (ending["container_state"], ending["exit_status"]) == ("running", None)
    assert await inspect(lab_docker, CONTAINER) is None


async def test_container_created_but_never_started_is_started(
    lab_world: LabWorld, run_phase: PhaseRunner, lab_docker: aiodocker.Docker, busybox_image: str
) -> None:
    labels = our_labels("edge-1", playground="web-main", agent_chat="chat-1")
    config: dict[str, Any] = {"Image": busybox_image, "Cmd": ["sleep", "3600"], "Labels": labels}
    await lab_docker.containers.create(config, name=CONTAINER)

    run = await run_phase(process_agent_chats, lab_world)

    assert run.actions == [START]
    details = await inspect(lab_docker, CONTAINER)
    assert details is not None
    assert details["State"]["Running"]


async def test_container_not_ours_with_the_chats_name_is_left_alone(
    lab_world: LabWorld, run_phase: PhaseRunner, lab_docker: aiodocker.Docker, busybox_image: str
) -> None:
    foreign = await lab_docker.containers.create(
        {"Image": busybox_image, "Cmd": ["true"]}, name=CONTAINER
    )
    try:
        with pytest.raises(PartialFailure) as failed:
            await run_phase(process_agent_chats, lab_world)
        details = await inspect(lab_docker, CONTAINER)
    finally:
        await foreign.delete(force=True)

    assert list(failed.value.failed) == ["chat-1"]
    assert "is already in use" in str(failed.value)
    assert details is not None
    assert details["Id"] == foreign.id
    assert details["State"]["Status"] == "created"


async def test_chat_image_the_host_lacks_is_pulled_with_the_playspecs_credentials(
    lab_world: LabWorld,
    run_phase: PhaseRunner,
    lab_docker: aiodocker.Docker,
    docker_daemon: DockerDaemon,
    registry: RegistryServer,
    busybox_image: str,
) -> None:
    repository = f"playguard/chat-{uuid.uuid4().hex[:12]}:1"
    image = push_image(docker_daemon, registry, busybox_image, repository)
    docker_daemon.cli("rmi", image)
    set_chat(lab_world, image=image)
    try:
        run = await run_phase(process_agent_chats, lab_world)
        details = await inspect(lab_docker, CONTAINER)
    finally:
        # Only untags: the image is the lab's busybox, which keeps its other tags.
        with contextlib.suppress(LabCommandFailed):
            docker_daemon.cli("rmi", image)

    assert run.actions == [f"pull {image}", START]
    assert details is not None
    assert details["State"]["Running"]


async def test_dry_run_starts_and_removes_nothing(
    lab_world: LabWorld, run_phase: PhaseRunner, lab_docker: aiodocker.Docker
) -> None:
    planned = await run_phase(process_agent_chats, lab_world, dry_run=True)
    assert planned.actions == [f"would {START}"]
    assert planned.report.findings["chats"] == {"chat-1": {"state": "would start"}}
    assert await inspect(lab_docker, CONTAINER) is None

    await run_phase(process_agent_chats, lab_world)
    set_chat(lab_world, state="closed")
    planned = await run_phase(process_agent_chats, lab_world, dry_run=True)

    assert planned.actions == [f"would {REMOVE}"]
    assert planned.report.findings["chats"]["chat-1"]["state"] == "would remove"
    details = await inspect(lab_docker, CONTAINER)
    assert details is not None
    assert details["State"]["Running"]


REPLACE = f"replace agent chat container {CONTAINER} (its image, command or network changed)"


@pytest.mark.parametrize(
    "change",
    [
        {"command": ["sleep", "3599"]},
        {"command": ["sh", "-c", "sleep 3600; echo '$(touch /x)'"]},
        {"state": "active", "command": ["sleep", "3600", ""]},
    ],
)
async def test_changed_command_replaces_the_chats_container(
    lab_world: LabWorld,
    run_phase: PhaseRunner,
    lab_docker: aiodocker.Docker,
    change: dict[str, Any],
) -> None:
    await run_phase(process_agent_chats, lab_world)
    before = await inspect(lab_docker, CONTAINER)
    assert before is not None

    set_chat(lab_world, **change)
    replaced = await run_phase(process_agent_chats, lab_world)
    again = await run_phase(process_agent_chats, lab_world)

    assert replaced.actions == [REPLACE, START]
    found = replaced.report.findings["chats"]["chat-1"]
    assert found["state"] == "replaced"
    assert found["previous"]["container_state"] == "running"
    after = await inspect(lab_docker, CONTAINER)
    assert after is not None
    assert after["Id"] != before["Id"]
    assert after["Config"]["Cmd"] == change["command"]
    assert after["Config"]["Labels"]["io.playguard.fence"].isdigit()
    assert again.actions == [], "the new container matches the desired state"


async def test_dry_run_only_says_it_would_replace(
    lab_world: LabWorld, run_phase: PhaseRunner, lab_docker: aiodocker.Docker
) -> None:
    await run_phase(process_agent_chats, lab_world)
    before = await inspect(lab_docker, CONTAINER)
    set_chat(lab_world, command=["sleep", "7"])
    planned = await run_phase(process_agent_chats, lab_world, dry_run=True)
    assert planned.actions == [f"would {REPLACE}", f"would {START}"]
    after = await inspect(lab_docker, CONTAINER)
    assert before is not None
    assert after is not None
    assert after["Id"] == before["Id"]
