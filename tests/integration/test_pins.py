"""Pinning a Playground, end to end with the installed ``playguard`` against the lab: the pin is
kept in Redis beside the pause, a moved branch head leaves the pinned checkout where it is,
``plan`` says held and exits 0, and ``unpin`` lets the next cycle apply the head."""

from __future__ import annotations

import json
import subprocess
import uuid

import aiodocker
import pytest
import structlog
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import marquee_lock_name, pins_key
from playguard_async.coordination.lock import TokenLock
from playguard_async.coordination.pins import Pin, read_pins, record_pin_images, take_pin
from playguard_async.desired_state.model import Inventory
from playguard_async.phases.decision_copies import MEMORY
from playguard_async.phases.holds import pins_of
from playguard_async.phases.protocol import PhaseContext
from playguard_async.remote.ssh import RemoteSession, open_session
from playguard_lab import DockerDaemon, GitOrigin, RegistryServer, build_busybox_image, push_image
from tests.support.cli import EXIT_NOT_OK, LAB_SETTINGS, Playguard
from tests.support.playgrounds import (
    checkout_head,
    compose_yaml,
    project_containers,
    use_own_branch,
)
from tests.support.world import LAB_OPTIONS, LabWorld


def cycle(playguard: Playguard) -> subprocess.CompletedProcess[str]:
    done = playguard("cycle", "edge-1", timeout=180.0)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.parametrize("by", ["last-good", "commit"])
def test_a_pinned_playground_stays_while_its_head_moves_and_unpin_applies_the_head(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, store: SyncRedis, by: str
) -> None:
    branch = lab.data["playgrounds"][0]["branch"]
    cycle(playguard)
    pinned_at = checkout_head(git_origin, lab)
    revision = "last-good" if by == "last-good" else pinned_at

    pinned = playguard(
        "pin", "edge-1", "web-main", "--revision", revision, "--reason", "holding for the demo"
    )
    new_head = git_origin.commit(branch, {"NOTES": "a new head\n"}, "Move the head")
    held = cycle(playguard)
    plan = playguard("plan", "edge-1", timeout=180.0)
    plan_json = json.loads(playguard("plan", "edge-1", "--json", timeout=180.0).stdout)

    assert pinned.returncode == 0, pinned.stderr
    assert f"pinned at {revision} by " in pinned.stdout
    assert json.loads(store.hget(pins_key("edge-1"), "web-main") or "{}")["revision"] == revision
    assert checkout_head(git_origin, lab) == pinned_at
    assert "update playground" not in held.stdout
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert f"held: web-main: pinned at {revision} by " in plan.stdout
    assert "edge-1: in sync; 1 held" in plan.stdout
    assert plan_json["verdict"] == "in_sync"
    assert list(plan_json["held"]) == ["web-main"]
    assert plan_json["held"]["web-main"].startswith(f"pinned at {revision} by ")
    assert plan_json["held"]["web-main"].endswith(": holding for the demo")

    unpinned = playguard("unpin", "edge-1", "web-main")
    cycle(playguard)

    assert unpinned.stdout.strip() == "edge-1/web-main: unpinned"
    assert store.hkeys(pins_key("edge-1")) == [b"#seq"]  # the count of writes stays
    assert checkout_head(git_origin, lab) == new_head != pinned_at


@pytest.mark.parametrize("by", ["last-good", "commit"])
async def test_a_pin_at_the_revision_it_runs_changes_nothing_and_plans_in_sync(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, lab_docker: aiodocker.Docker,
    by: str,
) -> None:  # fmt: skip
    """Pinned where it already is, on a converged Playground: the plan right after says in sync
    with 1 held (exit 0), the cycles that follow leave its override and containers as they were,
    and ``status`` and ``describe`` name the pin and who took it."""
    cycle(playguard)
    commit = checkout_head(git_origin, lab)
    [before] = await project_containers(lab_docker)
    playguard("pin", "edge-1", "web-main", "--revision",
              "last-good" if by == "last-good" else commit, "--reason", "keep it")  # fmt: skip

    plan = playguard("plan", "edge-1", timeout=180.0)
    applied, again = cycle(playguard), cycle(playguard)
    [after] = await project_containers(lab_docker)
    status = playguard("status").stdout
    described = json.loads(playguard("describe", "edge-1", "--json").stdout)
    shown = "last-good" if by == "last-good" else commit[:12]

    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "edge-1: in sync; 1 held" in plan.stdout
    for run in (applied, again):
        assert "0 actions taken" in run.stdout, run.stdout
        assert "compose override" not in run.stdout
        assert "compose up" not in run.stdout
    assert (after["Id"], after["State"]["StartedAt"]) == (
        before["Id"],
        before["State"]["StartedAt"],
    )
    assert f"web-main pinned at {shown} by " in " ".join(status.split())
    assert "pinned at ?" not in status
    held = described["revisions"]["web-main"]
    assert held["held_by"].startswith(f"pinned at {shown} by ")
    assert held["running"]["commit"] == commit


@pytest.mark.parametrize("loss", ["flushall", "last write lost"])
def test_a_pin_redis_forgot_is_rebuilt_from_the_hosts_copy_and_still_holds(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, store: SyncRedis, loss: str
) -> None:
    """Each ``playguard cycle`` is a process of its own: it knows the pin only from Redis and
    the host's copy, which the first cycle after the pin wrote."""
    branch = lab.data["playgrounds"][0]["branch"]
    cycle(playguard)
    pinned_at = checkout_head(git_origin, lab)
    before = store.hgetall(pins_key("edge-1"))
    pinned = playguard("pin", "edge-1", "web-main", "--revision", "last-good", "--reason", "hold")
    assert pinned.returncode == 0, pinned.stderr
    cycle(playguard)  # the host keeps a copy
    kept_seq = store.hget(pins_key("edge-1"), "#seq")
    git_origin.commit(branch, {"NOTES": "a new head\n"}, "Move the head")
    if loss == "flushall":
        store.flushall()
    else:
        store.delete(pins_key("edge-1"))
        for name, value in before.items():
            store.hset(pins_key("edge-1"), name, value)

    outputs = [playguard("cycle", "edge-1", timeout=180.0) for _ in range(2)]

    assert outputs[-1].returncode == 0, outputs[-1].stdout + outputs[-1].stderr
    assert checkout_head(git_origin, lab) == pinned_at
    restored = Pin.parse("web-main", store.hget(pins_key("edge-1"), "web-main") or b"")
    assert restored is not None
    assert restored.revision == "last-good"
    assert store.hget(pins_key("edge-1"), "#seq") == kept_seq  # written back, not taken anew


async def pins_read_by_this_replica(redis: Redis, lab: LabWorld) -> dict[str, Pin]:
    """The pins a cycle of edge-1 by this process (a replica with ``MEMORY``) reads."""
    inventory = Inventory.model_validate(lab.data)
    marquee = inventory.marquee("edge-1")
    lease = await TokenLock(redis, marquee_lock_name("edge-1"), ttl=60.0).acquire()
    assert lease is not None
    try:
        async with open_session(marquee, LAB_OPTIONS, lease=lease) as session:

            async def remote() -> RemoteSession:
                return session

            ctx = PhaseContext(marquee=marquee, inventory=inventory, log=structlog.get_logger(),
                               dry_run=False, lease=lease, remote=remote)  # fmt: skip
            return await pins_of(ctx, session)
    finally:
        await lease.release()


async def test_a_replica_with_older_pins_reads_the_hosts_newer_copy_after_flushall(
    playguard: Playguard, lab: LabWorld, store: SyncRedis, redis: Redis
) -> None:
    """This process read the pin (write 1) and kept it in its memory; another replica (each
    ``playguard`` run is one) since unpinned (write 2) and its cycle put that on the host. After
    FLUSHALL this process reads the host's copy again, finds write 2 and writes that back, never
    its own older pin."""
    cycle(playguard)
    MEMORY.forget()
    pinned = playguard("pin", "edge-1", "web-main", "--revision", "last-good", "--reason", "one")
    assert pinned.returncode == 0, pinned.stderr
    assert list(await pins_read_by_this_replica(redis, lab)) == ["web-main"]
    playguard("unpin", "edge-1", "web-main")
    cycle(playguard)  # the other replica: the host's copy is write 2 now
    store.flushall()

    with capture_logs() as logs:
        after = await pins_read_by_this_replica(redis, lab)

    assert after == {}
    assert store.hgetall(pins_key("edge-1")) == {b"#seq": b"2"}
    rebuilt = [e for e in logs if e["event"] == "decisions.rebuilt"]
    assert [(e["kind"], e["seq"], e["pins"]) for e in rebuilt] == [("pins", 2, [])]


def test_a_pins_key_of_another_type_holds_every_playground_at_its_last_good_revision(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, store: SyncRedis
) -> None:
    branch = lab.data["playgrounds"][0]["branch"]
    cycle(playguard)
    held_at = checkout_head(git_origin, lab)
    store.rpush(pins_key("edge-1"), "not a hash")
    git_origin.commit(branch, {"NOTES": "a new head\n"}, "Move the head")

    cycle(playguard)
    plan = playguard("plan", "edge-1", timeout=180.0)

    assert checkout_head(git_origin, lab) == held_at
    assert store.type(pins_key("edge-1")) == b"list"
    assert f"pins key {pins_key('edge-1')} holds another type than a hash" in plan.stdout


def test_a_pinned_playground_that_fails_its_gate_is_reported_and_held_never_rolled_back(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, busybox_image: str
) -> None:
    """Under ``rollback: auto``, pinned at a commit whose healthcheck always fails, with a good
    head past it: the cycle reports it unhealthy at the pinned commit and ends ``unhealthy``
    (exit 4); it is neither rolled back to its last good revision nor moved to its head, and the
    next cycles change nothing and end the same."""
    lab.data["playspecs"][0].update(rollback="auto", health_timeout=8)
    playguard.configure(lab.data, **LAB_SETTINGS)
    branch = lab.data["playgrounds"][0]["branch"]
    cycle(playguard)
    good = checkout_head(git_origin, lab)
    bad = git_origin.commit(
        branch, {"compose.yaml": compose_yaml(busybox_image, healthcheck=True)}, "Always unhealthy"
    )
    head = git_origin.commit(branch, {"NOTES": "a later head\n"}, "Move the head past it")
    playguard("pin", "edge-1", "web-main", "--revision", bad, "--reason", "try it")

    failing = playguard("cycle", "edge-1", timeout=180.0)
    described = json.loads(playguard("describe", "edge-1", "--json").stdout)
    later = [playguard("cycle", "edge-1", timeout=180.0) for _ in range(2)]
    running = described["revisions"]["web-main"]

    assert failing.returncode == EXIT_NOT_OK, failing.stdout + failing.stderr
    assert "edge-1: unhealthy in reconcile_playgrounds: playground web-main unhealthy" in (
        failing.stdout
    )
    assert f"hold playground web-main at {bad[:12]}" in failing.stdout
    [said] = [line for line in described["still_wrong"] if line.startswith("web-main: ")]
    assert f"app: unhealthy (revision {bad[:12]} " in said
    assert f"last good {good[:12]} " in said
    assert "roll back" not in failing.stdout + failing.stderr
    assert running["running"]["commit"] == bad
    assert running["last_good"]["commit"] == good
    assert running["pinned"].startswith(f"pinned at {bad} by ")
    for run in later:
        assert run.returncode == EXIT_NOT_OK, run.stdout + run.stderr
        assert "playground web-main held back: its inputs failed; 0 actions taken" in run.stdout
        assert "roll back" not in run.stdout
    assert checkout_head(git_origin, lab) == bad != head


async def test_a_commit_pin_keeps_the_image_it_ran_when_its_tag_is_pushed_again(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, store: SyncRedis,
    docker_daemon: DockerDaemon, registry: RegistryServer, lab_docker: aiodocker.Docker,
) -> None:  # fmt: skip
    """Pinned at the commit it runs, then a new image pushed behind its tag: the cycles keep the
    image it ran, by the digest the first of them wrote into the pin, and change nothing after
    that; the cycle after ``unpin`` runs the new image."""
    old_build, new_build = (f"playguard-test/{uuid.uuid4().hex}:{n}" for n in ("old", "new"))
    build_busybox_image(docker_daemon, old_build, env={"BUILD": "old"})
    build_busybox_image(docker_daemon, new_build, env={"BUILD": "new"})
    repository = f"pin-test:{uuid.uuid4().hex[:10]}"
    tag = push_image(docker_daemon, registry, old_build, repository)
    try:
        use_own_branch(lab, git_origin, tag)
        lab.data["playspecs"][0]["images"] = [tag]
        playguard.configure(lab.data, **LAB_SETTINGS)
        cycle(playguard)
        [before] = await project_containers(lab_docker)
        commit = checkout_head(git_origin, lab)
        playguard("pin", "edge-1", "web-main", "--revision", commit, "--reason", "hold it")
        push_image(docker_daemon, registry, new_build, repository)

        applied, again = cycle(playguard), cycle(playguard)
        [held] = await project_containers(lab_docker)
        pin = json.loads(store.hget(pins_key("edge-1"), "web-main") or "{}")
        playguard("unpin", "edge-1", "web-main")
        unpinned = cycle(playguard)
        [after] = await project_containers(lab_docker)
    finally:
        docker_daemon.cli("rmi", "--force", old_build, new_build, tag)

    assert pin["revision"] == commit
    assert pin["images"]["app"].startswith(f"{registry.address}/pin-test@sha256:")
    assert "compose up playground web-main (pin: pinned at " in applied.stdout
    assert "0 actions taken" in again.stdout
    assert held["Image"] == before["Image"]
    assert held["Config"]["Image"] == pin["images"]["app"]
    assert after["Image"] != before["Image"]
    assert after["Config"]["Image"] == tag
    assert "compose up playground web-main" in unpinned.stdout


def test_pin_refuses_a_revision_or_playground_it_cannot_hold_and_stores_nothing(
    playguard: Playguard, lab: LabWorld, store: SyncRedis
) -> None:
    short = playguard("pin", "edge-1", "web-main", "--revision", "abc123", "--reason", "x")
    option = playguard(
        "pin", "edge-1", "web-main", "--revision", "--upload-pack=x", "--reason", "x"
    )
    unknown = playguard("pin", "edge-1", "nope", "--reason", "x")

    assert short.returncode == 1
    assert "give last-good or a full commit name" in short.stderr
    assert option.returncode != 0
    assert unknown.returncode == 1
    assert "no playground named 'nope' on marquee 'edge-1'" in unknown.stderr
    assert "Traceback" not in short.stderr + option.stderr + unknown.stderr
    assert store.exists(pins_key("edge-1")) == 0


async def test_pins_redis_holds_of_the_wrong_shape_read_as_none_with_one_line_each(
    redis: Redis,
) -> None:
    """Written by hand with redis-cli: a pin whose revision is an option, one that is not JSON,
    a field name that is not UTF-8, and, on another Marquee, a key of another type."""
    good = Pin.taken_now("web-main", "a" * 40, "demo")
    await take_pin(redis, "edge-1", good, 2.0)
    await redis.hset(pins_key("edge-1"), "evil", '{"revision": "--upload-pack=x"}')
    await redis.hset(pins_key("edge-1"), "garbage", b"\xff{{")
    await redis.hset(pins_key("edge-1"), b"\xff\xfe", good.encode())
    await redis.rpush(pins_key("edge-2"), "a list")

    with capture_logs() as logs:
        pins = await read_pins(redis, "edge-1", 2.0)
        other = await read_pins(redis, "edge-2", 2.0)

    assert set(pins) == {"web-main", "\ufffd\ufffd"}
    assert pins["web-main"] == good
    assert other == {}
    assert sorted(entry["event"] for entry in logs) == ["pin.unreadable"] * 3


async def test_pin_images_are_recorded_only_into_the_pin_the_cycle_read(redis: Redis) -> None:
    """A cycle writes a commit pin's images back into the hash: into the pin it read, never
    over an ``unpin`` or a new pin taken since it read it."""
    images = {"app": "127.0.0.1:5000/shop@sha256:" + "a" * 64}
    kept, lifted, replaced = (Pin.taken_now(name, "a" * 40, "demo") for name in ("k", "l", "r"))
    for pin in (kept, lifted, replaced):
        await take_pin(redis, "edge-1", pin, 2.0)
    await redis.hdel(pins_key("edge-1"), "l")
    newer = Pin.taken_now("r", "b" * 40, "a newer pin")
    await take_pin(redis, "edge-1", newer, 2.0)

    with capture_logs() as logs:
        held = [
            await record_pin_images(redis, "edge-1", p, images, 2.0)
            for p in (kept, lifted, replaced)
        ]
    pins = await read_pins(redis, "edge-1", 2.0)

    assert all(pin.images == images for pin in held)
    assert pins == {"k": held[0], "r": newer}
    assert newer.images is None
    assert [entry["event"] for entry in logs] == ["pin.changed_meanwhile"] * 2
