"""Whole cycles of the real engine with the seven built-in phases against the lab.

Each test drives ``Engine.cycle`` (or ``Engine.tick``) exactly as the daemon does: the Marquee's
lock in the lab's Redis, one SSH connection to the lab's sshd, the Docker API of the lab's dockerd
through it, the lab registry with auth and the lab git origin.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiodocker
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import marquee_lock_key
from playguard_async.coordination.records import CycleRecords
from playguard_async.desired_state.model import InventoryError
from playguard_async.desired_state.yaml_source import YamlInventorySource
from playguard_async.engine.results import CycleListener, CycleResult, Outcome
from playguard_async.phases.process_agent_chats import chat_container_name
from playguard_async.phases.protocol import Phase, PhaseContext, resolve_phases
from playguard_async.remote.docker import AGENT_CHAT, MANAGED, our_labels
from playguard_async.remote.ssh import open_session
from playguard_async.service.notifications import ChangeNotifier
from playguard_async.settings.sections import DEFAULT_PHASES
from playguard_lab import DockerDaemon, GitOrigin, SshServer
from tests.support.engine import EngineHarness, settings_for
from tests.support.playgrounds import (
    checkout_of,
    compose_yaml,
    project_containers,
    set_playground,
    use_own_branch,
)
from tests.support.world import LAB_OPTIONS, LabWorld, lab_marquee_fields

pytestmark = pytest.mark.integration

ALL_PHASES = resolve_phases(DEFAULT_PHASES)


def lab_cycles(
    redis: Redis,
    world: LabWorld,
    phases: Sequence[Phase] = ALL_PHASES,
    *,
    dry_run: bool = False,
    records: CycleRecords | None = None,
    listeners: Sequence[CycleListener] = (),
    clock: Callable[[], float] = time.time,
) -> EngineHarness:
    """An engine over the lab world (each change to it seen at the next cycle), with the built-in
    phases unless told otherwise; its cycles recorded in ``records`` when given, then told to
    ``listeners``; ``clock`` the wall clock of maintenance windows."""
    return EngineHarness(
        redis,
        *phases,
        state=world,
        open_session=lambda marquee, lease, cycle_dry_run, cycle_id, read_through: open_session(
            marquee,
            LAB_OPTIONS,
            lease=lease,
            dry_run=cycle_dry_run,
            cycle_id=cycle_id,
            read_through=read_through,
        ),
        records=records,
        listeners=listeners,
        clock=clock,
        replica_id="convergence",
        lock_ttl=120.0,
        redis_socket_timeout=2.0,
        remote_command_timeout=60.0,
        docker_api_timeout=60.0,
        dry_run=dry_run,
    )


def all_actions(result: CycleResult) -> list[str]:
    return [action for actions in result.actions.values() for action in actions]


async def running_chat(docker: aiodocker.Docker, chat: str = "chat-1") -> dict[str, Any]:
    info: dict[str, Any] = await docker.containers.container(chat_container_name(chat)).show()
    return info


@pytest.fixture
def world(lab_world: LabWorld, git_origin: GitOrigin, busybox_image: str) -> LabWorld:
    """The lab world on a branch of its own whose app stops at once (SIGKILL)."""
    use_own_branch(lab_world, git_origin, busybox_image)
    return lab_world


async def test_fresh_marquee_converges_in_one_cycle_then_takes_no_action(
    redis: Redis, world: LabWorld, lab_docker: aiodocker.Docker
) -> None:
    records = CycleRecords(redis, history_length=5, timeout=2.0)
    cycles = lab_cycles(redis, world, records=records)
    first = await cycles.cycle()
    assert first.outcome is Outcome.OK, first.reason
    for phase in (
        "sync_git",
        "refresh_credentials",
        "reconcile_playgrounds",
        "process_agent_chats",
    ):
        assert first.actions[phase], f"{phase} had work on a fresh Marquee"
    assert (checkout_of(world) / "compose.yaml").is_file()
    [app] = await project_containers(lab_docker)
    assert app["State"]["Running"]
    assert app["Config"]["Labels"][MANAGED] == "true"
    assert (await running_chat(lab_docker))["State"]["Running"]

    second = await cycles.cycle()
    assert second.outcome is Outcome.OK
    assert all_actions(second) == []
    last = await records.last("edge-1")
    assert last is not None
    assert (last["outcome"], last["fence"]) == ("ok", second.fence)
    assert [r["cycle"] for r in await records.history("edge-1")] == [
        second.cycle_id,
        first.cycle_id,
    ]


async def start_by_hand(
    docker: aiodocker.Docker, image: str, name: str, labels: dict[str, str]
) -> None:
    config: dict[str, Any] = {
        "Image": image,
        "Cmd": ["sleep", "3600"],
        "Labels": labels,
        "HostConfig": {"NetworkMode": "none"},
    }
    container = await docker.containers.create(config, name=name)
    await container.start()


async def test_drift_is_found_and_fixed_in_the_next_cycle(
    redis: Redis, world: LabWorld, lab_docker: aiodocker.Docker, busybox_image: str
) -> None:
    cycles = lab_cycles(redis, world)
    assert (await cycles.cycle()).outcome is Outcome.OK
    [app] = await project_containers(lab_docker)
    await lab_docker.containers.container(app["Id"]).kill()
    await lab_docker.containers.container(chat_container_name("chat-1")).delete(force=True)
    orphan, theirs = f"orphan-{uuid.uuid4().hex[:6]}", f"theirs-{uuid.uuid4().hex[:6]}"
    await start_by_hand(
        lab_docker, busybox_image, orphan, our_labels("edge-1", playground="gone-playground")
    )
    await start_by_hand(lab_docker, busybox_image, theirs, {"purpose": "not ours"})
    try:
        fixed = await cycles.cycle()
        assert fixed.outcome is Outcome.OK, fixed.reason
        assert fixed.actions["reconcile_playgrounds"]
        assert fixed.actions["process_agent_chats"]
        assert fixed.actions["sweep_orphans"]
        [app_again] = await project_containers(lab_docker)
        assert app_again["State"]["Running"]
        assert (await running_chat(lab_docker))["State"]["Running"]
        names = [c["Names"][0].lstrip("/") for c in await lab_docker.containers.list(all=True)]
        assert orphan not in names
        assert theirs in names, "a container without our labels is never touched"

        calm = await cycles.cycle()
        assert all_actions(calm) == []
    finally:
        await lab_docker.containers.container(theirs).delete(force=True)


async def test_pushed_compose_change_recreates_and_deleted_branch_is_reported(
    redis: Redis, world: LabWorld, lab_docker: aiodocker.Docker, git_origin: GitOrigin,
    busybox_image: str,
) -> None:  # fmt: skip
    cycles = lab_cycles(redis, world)
    assert (await cycles.cycle()).outcome is Outcome.OK
    [before] = await project_containers(lab_docker)
    branch = world.data["playgrounds"][0]["branch"]
    git_origin.commit(branch, {"compose.yaml": compose_yaml(busybox_image, sleep="86401")}, "x")

    changed = await cycles.cycle()
    assert changed.outcome is Outcome.OK, changed.reason
    [after] = await project_containers(lab_docker)
    assert after["Id"] != before["Id"]
    assert after["Config"]["Cmd"] == ["sleep", "86401"]
    assert all_actions(await cycles.cycle()) == []

    git_origin.delete_branch(branch)
    gone = await cycles.cycle()
    assert gone.findings["fetch_branches"]["branch_gone"] == {"web-main": branch}


async def test_expired_playground_is_brought_down_and_stays_down(
    redis: Redis, world: LabWorld, lab_docker: aiodocker.Docker
) -> None:
    cycles = lab_cycles(redis, world)
    assert (await cycles.cycle()).outcome is Outcome.OK
    set_playground(world, expires_at=(datetime.now(UTC) - timedelta(minutes=1)).isoformat())
    expired = await cycles.cycle()
    assert expired.outcome is Outcome.OK, expired.reason
    state = expired.findings["reconcile_playgrounds"]["playgrounds"]["web-main"]["state"]
    assert state == "expired"
    assert await project_containers(lab_docker) == []
    assert all_actions(await cycles.cycle()) == []


async def test_dry_run_cycle_reports_and_changes_nothing(
    redis: Redis, world: LabWorld, lab_docker: aiodocker.Docker
) -> None:
    result = await lab_cycles(redis, world, dry_run=True).cycle()
    assert result.outcome is Outcome.OK, result.reason
    actions = all_actions(result)
    assert actions
    assert all(action.startswith("would ") for action in actions)
    assert not checkout_of(world).exists()
    assert await project_containers(lab_docker) == []
    filters = json.dumps({"label": [AGENT_CHAT]})
    assert await lab_docker.containers.list(all=True, filters=filters) == []


class StopServer:
    """A phase that stops a lab server mid-cycle, as an outage would."""

    def __init__(self, server: SshServer | DockerDaemon) -> None:
        self.name = f"stop_{type(server).__name__.lower()}"
        self.server = server

    async def __call__(self, ctx: PhaseContext) -> None:
        self.server.stop()


def phases_named(*names: str) -> list[Phase]:
    return resolve_phases(names)


async def test_sshd_stopped_mid_cycle_fails_that_cycle_and_releases(
    redis: Redis, world: LabWorld, ssh_server: SshServer
) -> None:
    phases = [*phases_named("sync_git"), StopServer(ssh_server), *phases_named("sync_git")]
    try:
        result = await lab_cycles(redis, world, phases).cycle()
    finally:
        ssh_server.restart()
    assert (result.outcome, result.phase) == (Outcome.UNREACHABLE, None)
    assert f"(127.0.0.1:{ssh_server.port})" in str(result.reason)
    assert await redis.exists(marquee_lock_key("edge-1")) == 0
    assert (await lab_cycles(redis, world).cycle()).outcome is Outcome.OK


async def test_dockerd_stopped_fails_the_cycle_with_a_clear_error(
    redis: Redis, world: LabWorld, docker_daemon: DockerDaemon
) -> None:
    phases = [StopServer(docker_daemon), *phases_named("reconcile_playgrounds")]
    try:
        result = await lab_cycles(redis, world, phases).cycle()
    finally:
        docker_daemon.restart()
    assert (result.outcome, result.phase) == (Outcome.PHASE_FAILED, "reconcile_playgrounds")
    assert "edge-1" in str(result.reason)


async def test_unknown_host_key_fails_the_cycle_naming_the_fingerprint(
    redis: Redis, world: LabWorld, ssh_server: SshServer, tmp_path: Path
) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    world.data["marquees"][0]["known_hosts"] = str(empty)
    result = await lab_cycles(redis, world).cycle()
    assert (result.outcome, result.phase) == (Outcome.UNREACHABLE, None)
    assert str(result.reason).startswith(f"host key mismatch (127.0.0.1:{ssh_server.port}): ")
    assert ssh_server.host_key_fingerprint in str(result.reason)
    assert not checkout_of(world).exists()


async def test_shell_in_a_branch_is_rejected_before_anything_reaches_the_host(
    world: LabWorld, tmp_path: Path
) -> None:
    canary = tmp_path / "pwned"
    set_playground(world, branch=f"main;touch {canary}")
    inventory_file = tmp_path / "inventory.yaml"
    inventory_file.write_text(json.dumps(world.data, indent=2))
    with pytest.raises(InventoryError) as rejected:
        await YamlInventorySource(inventory_file).load()
    assert "playgrounds[0].branch" in str(rejected.value)
    assert str(inventory_file) in str(rejected.value)
    assert not canary.exists()
    assert not Path(world.data["marquees"][0]["workdir"]).exists()


def add_second_marquee(
    world: LabWorld, host: tuple[SshServer, DockerDaemon], workdir: Path, **changes: str
) -> None:
    """Put ``edge-2`` (the second lab host) in the world with a playground ``web-two`` on it."""
    ssh, docker = host
    marquee = {**lab_marquee_fields(ssh, docker, workdir), "name": "edge-2", **changes}
    world.data["marquees"].append(marquee)
    world.data["playgrounds"].append(
        {**world.data["playgrounds"][0], "name": "web-two", "marquee": "edge-2"}
    )


async def tick_all(cycles: EngineHarness) -> dict[str, CycleResult]:
    """One engine tick over every launchable Marquee, waited for."""
    return {r.marquee: r for r in await cycles.tick()}


async def test_two_marquees_reconcile_in_one_tick_without_touching_each_other(
    redis: Redis, world: LabWorld, lab_docker: aiodocker.Docker,
    second_host: tuple[SshServer, DockerDaemon], tmp_path: Path,
) -> None:  # fmt: skip
    add_second_marquee(world, second_host, tmp_path / "workdir-2")
    world.data["agent_chats"].append(
        {**world.data["agent_chats"][0], "name": "chat-2", "playground": "web-two"}
    )
    results = await tick_all(lab_cycles(redis, world))
    assert {name: r.outcome for name, r in results.items()} == {
        "edge-1": Outcome.OK,
        "edge-2": Outcome.OK,
    }
    other_docker = aiodocker.Docker(url=second_host[1].url)
    try:
        here = await lab_docker.containers.list(all=True, filters=json.dumps({"label": [MANAGED]}))
        there = await other_docker.containers.list(
            all=True, filters=json.dumps({"label": [MANAGED]})
        )
        assert {c["Labels"]["io.playguard.marquee"] for c in here} == {"edge-1"}
        assert {c["Labels"]["io.playguard.marquee"] for c in there} == {"edge-2"}
        assert {c["Labels"].get(AGENT_CHAT) for c in there} == {None, "chat-2"}
    finally:
        for container in await other_docker.containers.list(all=True):
            await container.delete(force=True)
        await other_docker.close()


async def test_a_failing_marquee_does_not_stop_another_in_the_same_tick(
    redis: Redis, world: LabWorld, lab_docker: aiodocker.Docker,
    second_host: tuple[SshServer, DockerDaemon], tmp_path: Path,
) -> None:  # fmt: skip
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    add_second_marquee(world, second_host, tmp_path / "workdir-2", known_hosts=str(empty))
    results = await tick_all(lab_cycles(redis, world))
    assert results["edge-2"].outcome is Outcome.UNREACHABLE
    assert str(results["edge-2"].reason).startswith("host key mismatch (127.0.0.1:")
    assert results["edge-1"].outcome is Outcome.OK
    assert len(await project_containers(lab_docker)) == 1


async def test_detect_mode_reports_drift_every_cycle_changes_nothing_and_tells_it_once(
    redis: Redis, world: LabWorld, lab_docker: aiodocker.Docker
) -> None:
    notifier = ChangeNotifier(settings_for(), redis)
    cycles = lab_cycles(redis, world, listeners=[notifier.notify_cycle])
    assert (await cycles.cycle()).outcome is Outcome.OK
    await lab_docker.containers.container(chat_container_name("chat-1")).delete(force=True)
    world.data["marquees"][0]["mode"] = "detect"
    containers = await lab_docker.containers.list(all=True)
    before = [await container.show() for container in containers]

    with capture_logs() as logs:
        detected = [await cycles.cycle() for _ in range(3)]

    for result in detected:
        assert (result.outcome, result.dry_run) == (Outcome.OK, True), result.reason
        would = result.actions["process_agent_chats"]
        assert would, "the drift is reported at every cycle"
        assert all(action.startswith("would ") for action in would)
    after = [await container.show() for container in await lab_docker.containers.list(all=True)]
    assert after == before, "the host is left as it is: same containers, same inspect"
    told = [log["transition"] for log in logs if log["event"] == "marquee.transition"]
    assert told == ["drifted"], "told once, not at every cycle"

    world.data["marquees"][0]["mode"] = "apply"
    restored = await cycles.cycle()
    assert (restored.outcome, restored.dry_run) == (Outcome.OK, False)
    assert (await running_chat(lab_docker))["State"]["Running"]


@pytest.mark.usefixtures("lab_docker")  # it removes the containers the first cycle started
async def test_detect_mode_tells_a_pending_release_as_a_release_not_as_drift(
    redis: Redis, world: LabWorld, git_origin: GitOrigin, busybox_image: str
) -> None:
    """A new commit a detect Marquee has not applied is the desired state moving, not the host:
    its transition is ``release_pending``, told once, and never ``drifted``."""
    notifier = ChangeNotifier(settings_for(), redis)
    cycles = lab_cycles(redis, world, listeners=[notifier.notify_cycle])
    assert (await cycles.cycle()).outcome is Outcome.OK
    branch = world.data["playgrounds"][0]["branch"]
    git_origin.commit(branch, {"compose.yaml": compose_yaml(busybox_image, sleep="86401")}, "R2")
    world.data["marquees"][0]["mode"] = "detect"

    with capture_logs() as logs:
        detected = [await cycles.cycle() for _ in range(2)]

    assert all(result.actions.get("reconcile_playgrounds") for result in detected), detected
    told = [log["transition"] for log in logs if log["event"] == "marquee.transition"]
    assert told == ["release_pending"], "told once, as a release"


async def test_outside_its_allow_window_a_cycle_changes_nothing_and_inside_it_converges(
    redis: Redis, world: LabWorld, lab_docker: aiodocker.Docker
) -> None:
    """The clock is injected, not waited for: Saturday noon in Berlin is outside the nightly
    window from 02:00, 02:30 is inside it."""
    world.data["marquees"][0]["windows"] = [
        {"kind": "allow", "cron": "0 2 * * *", "duration": 3600, "timezone": "Europe/Berlin"}
    ]
    now = [datetime(2026, 12, 5, 11, 0, tzinfo=UTC).timestamp()]
    cycles = lab_cycles(redis, world, clock=lambda: now[0])

    outside = await cycles.cycle()
    assert (outside.outcome, outside.dry_run) == (Outcome.OK, True), outside.reason
    assert all(action.startswith("would ") for action in all_actions(outside))
    assert all_actions(outside), "the drift is found all the same"
    assert not checkout_of(world).exists()
    assert await project_containers(lab_docker) == []

    now[0] = datetime(2026, 12, 5, 1, 30, tzinfo=UTC).timestamp()  # 02:30 CET
    inside = await cycles.cycle()
    assert (inside.outcome, inside.dry_run) == (Outcome.OK, False), inside.reason
    [app] = await project_containers(lab_docker)
    assert app["State"]["Running"]
