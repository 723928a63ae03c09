"""reconcile_playgrounds against the lab: docker-compose over SSH, the lab's dockerd underneath."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import aiodocker
import pytest
from redis.asyncio import Redis

from playguard_async.coordination.containers_seen import SeenRead, parse_seen
from playguard_async.coordination.keys import containers_seen_key
from playguard_async.kits.last_written import LastWritten
from playguard_async.phases.reconcile_playgrounds import reconcile_playgrounds
from playguard_async.phases.sync_git import sync_git
from playguard_async.remote.compose import CONFIG_HASH_LABEL
from playguard_async.remote.docker import our_labels
from playguard_async.remote.ssh import RemoteSession
from tests.support.edge import LabEdge
from tests.support.playgrounds import (
    checkout_head,
    checkout_of,
    compose_yaml,
    override_of,
    project_containers,
    set_playground,
)
from tests.support.world import LAB_OPTIONS, PhaseRun

pytestmark = pytest.mark.integration

WRITE_OVERRIDE = "write the compose override of playground web-main"
RECORD = "record the health of playground web-main"


def up(cause: str, *drift: str) -> str:
    """The ``up`` of web-main, naming its cause in the glossary's words: ``drift`` with what
    differed on the host, or a ``release`` with what moved."""
    return f"compose up playground web-main ({cause}: {'; '.join(drift)})"


def short(commit: str) -> str:
    return commit[:7]


async def synced(edge: LabEdge, **compose: Any) -> str:
    """A playground on a branch of its own, cloned; returns the branch."""
    branch = edge.own_branch(**compose)
    await edge.run(sync_git)
    return branch


async def brought_up(edge: LabEdge, **compose: Any) -> dict[str, Any]:
    """A synced playground after a first reconcile; returns its app container, inspected."""
    await synced(edge, **compose)
    await edge.run(reconcile_playgrounds)
    return await only_container(edge.docker)


async def repo_digest(docker: aiodocker.Docker, image_id: str) -> str:
    """The repo digest the lab registry gave the image (how last good names it)."""
    digests: list[str] = (await docker.images.inspect(image_id))["RepoDigests"]
    return digests[0]


async def only_container(docker: aiodocker.Docker) -> dict[str, Any]:
    containers = await project_containers(docker)
    assert len(containers) == 1, containers
    return containers[0]


def findings(run: PhaseRun) -> dict[str, Any]:
    playgrounds: dict[str, Any] = run.report.findings["playgrounds"]
    return playgrounds["web-main"]  # type: ignore[no-any-return]


async def test_fresh_playground_comes_up_with_our_labels_then_costs_nothing(edge: LabEdge) -> None:
    await synced(edge)

    first = await edge.run(reconcile_playgrounds)
    second = await edge.run(reconcile_playgrounds)

    head = short(checkout_head(edge.origin, edge.world))
    assert first.actions == [WRITE_OVERRIDE, up("release", f"first deploy at {head}"), RECORD]
    assert [(n.kind, n.detail) for n in first.report.notices] == [
        ("release", f"first deploy at {head}")
    ]
    [container] = await project_containers(edge.docker)
    digest = await repo_digest(edge.docker, container["Image"])
    revision = findings(first)["revision"]
    assert findings(first) == {
        "state": "running",
        "drift": ["override changed", "app: missing"],
        "actions": first.actions,
        "health": "healthy",
        "last_good": f"app={digest}",
        "revision": revision,
        "last_good_revision": revision,
    }
    assert revision["commit"] == checkout_head(edge.origin, edge.world)
    assert revision["images"] == {"app": digest}
    assert revision["env"] == "-"
    assert container["State"]["Running"]
    assert (
        our_labels("edge-1", playground="web-main").items() <= container["Config"]["Labels"].items()
    )
    assert second.actions == []
    assert findings(second) == {
        "state": "running",
        "drift": [],
        "actions": [],
        "last_good": findings(first)["last_good"],
        "revision": revision,
        "last_good_revision": revision,
    }


async def test_killed_container_is_brought_back(edge: LabEdge) -> None:
    container = await brought_up(edge)
    await edge.docker.containers.container(container["Id"]).kill()
    name = container["Name"].lstrip("/")

    repaired = await edge.run(reconcile_playgrounds)

    assert repaired.actions == [up("drift", f"app: {name} exited")]
    assert [(n.kind, n.detail) for n in repaired.report.notices] == [
        ("drift", f"app: {name} exited")
    ]
    assert (await only_container(edge.docker))["State"]["Running"]
    assert (await edge.run(reconcile_playgrounds)).actions == []


async def test_removed_container_is_brought_back(edge: LabEdge) -> None:
    container = await brought_up(edge)
    await edge.docker.containers.container(container["Id"]).delete(force=True)

    repaired = await edge.run(reconcile_playgrounds)

    assert repaired.actions == [up("drift", "app: missing")]
    replacement = await only_container(edge.docker)
    assert replacement["State"]["Running"]
    assert replacement["Id"] != container["Id"]


async def test_compose_change_synced_from_origin_recreates_the_container(edge: LabEdge) -> None:
    container = await brought_up(edge)
    was = short(checkout_head(edge.origin, edge.world))
    branch = edge.world.data["playgrounds"][0]["branch"]
    edge.origin.commit(branch, {"compose.yaml": compose_yaml(edge.image, sleep="86401")}, "Cmd")
    await edge.run(sync_git)

    recreated = await edge.run(reconcile_playgrounds)

    release = f"commit {was} -> {short(checkout_head(edge.origin, edge.world))}"
    assert recreated.actions == [up("release", release), RECORD]
    assert [(n.kind, n.detail) for n in recreated.report.notices] == [("release", release)]
    assert recreated.report.findings["playgrounds"]["web-main"]["drift"] == [
        f"app: {container['Name'].lstrip('/')} config changed"
    ]
    replacement = await only_container(edge.docker)
    assert replacement["Id"] != container["Id"]
    assert replacement["Config"]["Cmd"] == ["sleep", "86401"]
    labels = replacement["Config"]["Labels"]
    assert labels[CONFIG_HASH_LABEL] != container["Config"]["Labels"][CONFIG_HASH_LABEL]
    assert (await edge.run(reconcile_playgrounds)).actions == []


async def test_expired_playground_is_taken_down_then_left_alone(edge: LabEdge) -> None:
    await brought_up(edge)
    expired_at = datetime.now(UTC) - timedelta(minutes=1)
    set_playground(edge.world, expires_at=expired_at.isoformat())

    taken_down = await edge.run(reconcile_playgrounds)
    later = await edge.run(reconcile_playgrounds)

    reason = f"expired at {expired_at.isoformat()}"
    assert taken_down.actions == [f"take down playground web-main ({reason})"]
    assert findings(taken_down) == {
        "state": "expired",
        "drift": [reason],
        "actions": taken_down.actions,
    }
    assert await project_containers(edge.docker) == []
    networks = await edge.docker.networks.list()
    assert not [network for network in networks if network["Name"].startswith("pg-web-main")]
    assert later.actions == []
    assert findings(later) == {"state": "expired", "drift": [], "actions": []}


async def test_stopped_playground_is_stopped_then_left_alone(edge: LabEdge) -> None:
    container = await brought_up(edge)
    set_playground(edge.world, state="stopped")

    stopped = await edge.run(reconcile_playgrounds)
    later = await edge.run(reconcile_playgrounds)

    assert stopped.actions == ["stop playground web-main (state is stopped)"]
    after = await only_container(edge.docker)
    assert after["Id"] == container["Id"]
    assert after["State"]["Status"] == "exited"
    assert later.actions == []
    assert findings(later) == {"state": "stopped", "drift": [], "actions": []}


async def reconcile_patient_then_impatient(edge: LabEdge) -> tuple[PhaseRun, PhaseRun]:
    """Reconcile once with an hour's patience for stuck containers, then with none."""
    patient = await edge.run(
        reconcile_playgrounds, options=dataclasses.replace(LAB_OPTIONS, stuck_after=3600)
    )
    impatient = await edge.run(
        reconcile_playgrounds, options=dataclasses.replace(LAB_OPTIONS, stuck_after=0)
    )
    return patient, impatient


async def test_container_created_but_never_started_is_recreated_once_stuck(edge: LabEdge) -> None:
    original = await brought_up(edge)
    await edge.docker.containers.container(original["Id"]).delete(force=True)
    # What compose leaves when it dies between creating a container and starting it.
    never_started = await edge.docker.containers.create(
        {
            "Image": original["Config"]["Image"],
            "Cmd": original["Config"]["Cmd"],
            "Labels": original["Config"]["Labels"],
            "HostConfig": {"NetworkMode": "none"},
        },
        name=original["Name"].lstrip("/"),
    )

    patient, impatient = await reconcile_patient_then_impatient(edge)

    assert patient.actions == []
    [action] = impatient.actions
    assert action.startswith(
        "recreate stuck services of playground web-main "
        f"(app: {original['Name'].lstrip('/')} created for "
    )
    replacement = await only_container(edge.docker)
    assert replacement["Id"] != never_started.id
    assert replacement["State"]["Running"]


async def test_container_unhealthy_after_it_was_verified_is_recreated_once_stuck(
    edge: LabEdge,
) -> None:
    original = await brought_up(edge, healthcheck=["CMD", "/bin/sh", "-c", "! test -e /tmp/broken"])
    breaking = await edge.docker.containers.container(original["Id"]).exec(
        ["/bin/sh", "-c", "touch /tmp/broken"]
    )
    await breaking.start(detach=True)
    await wait_unhealthy(edge.docker, original["Id"])

    patient, impatient = await reconcile_patient_then_impatient(edge)

    assert patient.actions == []
    [action] = impatient.actions
    name = original["Name"].lstrip("/")
    assert action.startswith(
        f"recreate stuck services of playground web-main (app: {name} unhealthy"
    )
    assert (await only_container(edge.docker))["Id"] != original["Id"]


async def wait_unhealthy(
    docker: aiodocker.Docker, container_id: str, timeout: float = 15.0
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        details = await docker.containers.container(container_id).show()
        if details["State"]["Health"]["Status"] == "unhealthy":
            return
        assert time.monotonic() < deadline, details["State"]
        await asyncio.sleep(0.1)


async def test_dry_run_reports_would_and_changes_nothing(edge: LabEdge) -> None:
    await synced(edge)
    head = short(checkout_head(edge.origin, edge.world))

    fresh = await edge.run(reconcile_playgrounds, dry_run=True)

    assert fresh.actions == [
        f"would {WRITE_OVERRIDE}",
        f"would {up('release', f'first deploy at {head}')}",
        f"would {RECORD}",
    ]
    assert not override_of(edge.world).exists()
    assert await project_containers(edge.docker) == []

    await edge.run(reconcile_playgrounds)
    container = await only_container(edge.docker)
    await edge.docker.containers.container(container["Id"]).kill()
    killed = await edge.run(reconcile_playgrounds, dry_run=True)

    name = container["Name"].lstrip("/")
    assert killed.actions == [f"would {up('drift', f'app: {name} exited')}"]
    assert (await only_container(edge.docker))["State"]["Status"] == "exited"


async def test_playground_not_cloned_yet_is_reported_and_left_alone(edge: LabEdge) -> None:
    edge.own_branch()

    run = await edge.run(reconcile_playgrounds)

    assert run.actions == []
    assert findings(run) == {"state": "no_checkout", "drift": [], "actions": []}


async def test_a_dry_run_plans_what_follows_the_clone_sync_git_would_make(edge: LabEdge) -> None:
    branch = edge.own_branch()
    head = short(edge.origin.git("ls-remote", edge.origin.url, branch).split()[0])

    planned = await edge.run(reconcile_playgrounds, dry_run=True)

    assert planned.actions == [
        f"would {WRITE_OVERRIDE}",
        f"would {up('release', f'first deploy at {head}')}",
        f"would {RECORD}",
    ]
    assert [(n.kind, n.detail) for n in planned.report.notices] == [
        ("release", f"first deploy at {head}")
    ]
    assert not checkout_of(edge.world).exists()
    assert await project_containers(edge.docker) == []


async def test_what_the_phase_saw_is_kept_for_the_web_view_and_written_again_only_on_change(
    edge: LabEdge, redis: Redis
) -> None:
    await synced(edge)
    memo = LastWritten(3600.0)

    async def reconciled(*, dry_run: bool = False) -> SeenRead:
        def share_memo(session: RemoteSession) -> None:
            session.seen_memo = memo

        await edge.runner(reconcile_playgrounds, edge.world, dry_run=dry_run, watch=share_memo)
        return parse_seen(await redis.get(key) or b"null")

    key = containers_seen_key("edge-1")
    kept = (await reconciled()).seen
    container = await only_container(edge.docker)
    assert kept is not None
    [seen] = kept.containers
    assert (seen.playground, seen.service, seen.name, seen.state, seen.restarts) == (
        "web-main", "app", container["Name"].lstrip("/"), "running", container["RestartCount"]
    )  # fmt: skip
    assert (seen.image_id, seen.digest) == (
        container["Image"], await repo_digest(edge.docker, container["Image"])
    )  # fmt: skip
    assert kept.desired["web-main"].services == ["app"]
    definition = container["Config"]["Labels"][CONFIG_HASH_LABEL][:12]
    assert (kept.desired["web-main"].definitions, seen.config_hash) == (
        {"app": definition},
        definition,
    )
    assert kept.desired["web-main"].env == "-"

    await redis.delete(key)
    assert (await reconciled()).unreadable == "the stored value is not a JSON object"
    assert await redis.get(key) is None, "an unchanged listing is not written again"

    await edge.docker.containers.container(container["Id"]).kill()
    exited = (await reconciled(dry_run=True)).seen
    assert exited is not None
    assert [each.state for each in exited.containers] == ["exited"]
