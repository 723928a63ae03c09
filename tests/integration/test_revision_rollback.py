"""A release is a revision: the five kinds of bad release our users meet, each under ``auto``,
``notify`` and ``off``, against the lab (compose over SSH, the lab's dockerd, registry and git
origin). Under ``auto`` the Playground is back at its last good commit, images and ``.env``
within the cycle, stays there without retrying, and takes the next good commit; under
``notify`` and ``off`` nothing changes, and the notice names both revisions. A rollback that
cannot have a part of its revision (its commit, an image digest, the host's ``.env`` copy)
changes nothing on the host, says what is missing, and is told once."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from playguard_async.coordination.keys import rollback_blocked_key
from playguard_async.coordination.pins import LAST_GOOD, Pin, take_pin
from playguard_async.cycle_record import ABSENT_FILE, NoticeKind
from playguard_async.phases.protocol import PhaseContext, PhaseReport
from playguard_async.phases.pull_images import pull_images
from playguard_async.phases.reconcile_playgrounds import reconcile_playgrounds
from playguard_async.phases.sync_git import sync_git
from playguard_async.remote.git import checkout_dir
from playguard_async.remote.guard import state_dir
from playguard_async.remote.memo import ComposeMemo
from playguard_async.remote.revision import Revision, kept_env_path
from playguard_async.remote.rollback_check import check_revision
from playguard_async.remote.ssh import RemoteSession
from playguard_lab import DockerDaemon, RegistryServer, build_busybox_image, push_image
from tests.support.edge import LabEdge
from tests.support.playgrounds import (
    PLAYGROUND_NAME,
    checkout_head,
    checkout_of,
    found,
    notices,
    override_of,
    project_containers,
    running,
    set_playground,
)
from tests.support.world import LAB_OPTIONS, PhaseRun

pytestmark = pytest.mark.integration

CYCLE = (sync_git, pull_images, reconcile_playgrounds)

SERVES = ["/bin/sh", "-c", 'test "$MODE" = good && exec sleep 86400; exit 3']
"""Runs while ``MODE`` (from ``.env``, through the compose file) is ``good``; exits 3 at once
otherwise."""

HEALTHY_IMAGE = ["CMD", "/bin/sh", "-c", "env | grep -q ^HEALTHY=yes"]


@dataclass(frozen=True)
class Images:
    """Two images of the lab registry, made once for the module: one the health test passes
    on (it sets HEALTHY), one it fails on."""

    docker: DockerDaemon
    registry: RegistryServer
    healthy: str
    unhealthy: str

    def push(self, local: str, tag: str) -> str:
        """``local`` under ``tag`` of the test's repository; the reference."""
        return push_image(self.docker, self.registry, local, f"revision-test:{tag}")


@pytest.fixture(scope="module")
def images(docker_daemon: DockerDaemon, registry: RegistryServer) -> Iterator[Images]:
    made = Images(
        docker_daemon,
        registry,
        f"playguard-test/{uuid.uuid4().hex}:healthy",
        f"playguard-test/{uuid.uuid4().hex}:unhealthy",
    )
    build_busybox_image(docker_daemon, made.healthy, env={"HEALTHY": "yes"})
    build_busybox_image(docker_daemon, made.unhealthy)
    yield made
    docker_daemon.cli("rmi", "--force", made.healthy, made.unhealthy)


@dataclass
class Release:
    """The test's own branch and tag: what a release commits and pushes."""

    edge: LabEdge
    images: Images
    branch: str
    tag: str

    @property
    def ref(self) -> str:
        return f"{self.images.registry.address}/revision-test:{self.tag}"

    def commit(self, *, command: list[str] | None = None, env: str | None = None,
               healthcheck: list[str] | None = None, message: str = "release") -> None:  # fmt: skip
        """A commit of the compose file (and ``.env`` when given) on the test's branch."""
        app: dict[str, Any] = {
            "image": self.ref,
            "command": command or ["sleep", "86400"],
            "network_mode": "none",
            "stop_signal": "SIGKILL",
            "environment": {"MODE": "${MODE:-good}"},
            "healthcheck": {"test": healthcheck or HEALTHY_IMAGE, "interval": "1s", "retries": 1},
        }
        files = {"compose.yaml": json.dumps({"services": {"app": app}}, indent=2) + "\n"}
        if env is not None:
            files[".env"] = env
        self.edge.origin.commit(self.branch, files, message)

    def push(self, *, healthy: bool) -> None:
        self.images.push(self.images.healthy if healthy else self.images.unhealthy, self.tag)


def compose_healthcheck_fails(release: Release) -> None:
    release.commit(healthcheck=["CMD", "false"], message="a healthcheck that always fails")


def command_exits(release: Release) -> None:
    release.commit(command=["sh", "-c", "exit 3"], message="a crash loop")


def env_value_bad(release: Release) -> None:
    release.commit(command=SERVES, env="MODE=bad\n", message="a bad .env value")


def image_behind_tag_unhealthy(release: Release) -> None:
    release.push(healthy=False)


def compose_and_image(release: Release) -> None:
    release.push(healthy=False)
    release.commit(command=["sleep", "86401"], message="compose and image at once")


BAD_RELEASES: dict[str, Callable[[Release], None]] = {
    "compose-healthcheck": compose_healthcheck_fails,
    "crash-loop": command_exits,
    "env-value": env_value_bad,
    "image-behind-tag": image_behind_tag_unhealthy,
    "compose-and-image": compose_and_image,
}


@pytest.fixture
def release(edge: LabEdge, images: Images) -> Release:
    made = Release(edge, images, f"test-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex[:10])
    made.push(healthy=True)
    made.commit(command=SERVES, env="MODE=good\n", message="the good release")
    set_playground(edge.world, branch=made.branch)
    return made


def use_policy(edge: LabEdge, release: Release, rollback: str) -> None:
    edge.world.data["playspecs"][0].update(
        images=[release.ref], rollback=rollback, health_timeout=4
    )


@pytest.fixture
def memo() -> ComposeMemo:
    """The compose memo of the one replica that cycles the lab's Marquee in a test, kept across
    its cycles as the engine keeps its own: a cycle that finds nothing changed does not start
    compose (a Python program) twice to learn what it answered last time."""
    return ComposeMemo(16)


async def cycle(
    edge: LabEdge, memo: ComposeMemo, *, dry_run: bool = False, tells: bool = True
) -> PhaseRun:
    """One cycle of the lab's Marquee: the daemon's (``tells``), or a plan's (a dry run that
    tells no one)."""
    ran: PhaseRun = await edge.runner(CYCLE, edge.world, options=replace(LAB_OPTIONS),
                                      compose_memo=memo, dry_run=dry_run, tells=tells)  # fmt: skip
    return ran


def env_file(edge: LabEdge) -> str:
    return (Path(checkout_of(edge.world)) / ".env").read_text()


@pytest.mark.parametrize("kind", sorted(BAD_RELEASES))
async def test_auto_restores_the_whole_last_good_revision_and_waits_for_a_new_head(
    edge: LabEdge, release: Release, memo: ComposeMemo, kind: str
) -> None:
    use_policy(edge, release, "auto")
    first = await cycle(edge, memo)
    good = await running(edge.docker)
    good_commit = checkout_head(edge.origin, edge.world)
    good_revision = found(first)["revision"]
    BAD_RELEASES[kind](release)

    bad = await cycle(edge, memo)

    assert found(first)["health"] == "healthy", found(first).get("unhealthy")
    assert good_revision["commit"] == good_commit
    assert found(bad)["health"] == "unhealthy"
    assert found(bad)["rollback_health"] == "healthy"
    assert notices(bad, NoticeKind.ROLLED_BACK) == [found(bad)["rollback"]]
    assert found(bad)["last_good_revision"] == good_revision
    assert checkout_head(edge.origin, edge.world) == good_commit
    assert env_file(edge) == "MODE=good\n"
    after = await running(edge.docker)
    assert after["Image"] == good["Image"]
    assert after["Config"]["Image"] == good_revision["images"]["app"]
    assert after["State"]["Health"]["Status"] == "healthy"

    later = [await cycle(edge, memo) for _ in range(3)]

    assert [run.actions for run in later] == [[], [], []]
    assert (await running(edge.docker))["Id"] == after["Id"]
    assert all(notices(run, NoticeKind.ROLLED_BACK) == [] for run in later)
    assert all(found(run)["revision"] == good_revision for run in later)

    release.push(healthy=True)
    release.commit(command=SERVES, env="MODE=good\n", message="a new good release")
    fixed = await cycle(edge, memo)

    assert found(fixed)["health"] == "healthy"
    assert "rollback" not in found(fixed)
    assert found(fixed)["revision"]["commit"] == checkout_head(edge.origin, edge.world)
    assert found(fixed)["revision"]["commit"] != good_commit
    assert fixed.report.unhealthy is None


@pytest.mark.parametrize("kind", sorted(BAD_RELEASES))
@pytest.mark.parametrize("rollback", ["notify", "off"])
async def test_notify_and_off_change_nothing_and_name_both_revisions(
    edge: LabEdge, release: Release, memo: ComposeMemo, kind: str, rollback: str
) -> None:
    use_policy(edge, release, rollback)
    first = await cycle(edge, memo)
    good_short = found(first)["revision"]["commit"][:12]
    BAD_RELEASES[kind](release)

    bad = await cycle(edge, memo)
    container = await running(edge.docker)
    again = await cycle(edge, memo)

    assert found(bad)["health"] == "unhealthy"
    assert "rollback" not in found(bad)
    bad_short = found(bad)["revision"]["commit"][:12]
    [said] = notices(bad, NoticeKind.UNHEALTHY)
    assert f"revision {bad_short}" in said
    assert f"last good {good_short}" in said
    assert checkout_head(edge.origin, edge.world)[:12] == bad_short
    assert again.actions == []
    assert (await running(edge.docker))["Id"] == container["Id"]
    assert found(again)["health"] == "held"
    assert (bad.report.unhealthy is None) == (rollback == "off")


def host_path(path: str) -> Path:
    """A path of the lab host (the test's own user over SSH) as this process reads it."""
    return Path(os.path.expanduser(path))


def kept_env(edge: LabEdge) -> Path:
    return host_path(kept_env_path(edge.world.marquee(), PLAYGROUND_NAME))


def rewrite_last_good(edge: LabEdge, **revision: Any) -> None:
    """The host's health record with its last good revision's fields replaced."""
    path = host_path(record_path_of(edge))
    document = json.loads(path.read_text())
    document["last_good"].update(revision)
    path.write_text(json.dumps(document) + "\n")


def record_path_of(edge: LabEdge) -> str:
    return f"{state_dir(edge.world.marquee())}/playgrounds/{PLAYGROUND_NAME}.json"


def commit_gone(edge: LabEdge, made: Release) -> str:
    rewrite_last_good(edge, commit=uuid.uuid4().hex + uuid.uuid4().hex[:8])
    return "commit"


def image_gone(edge: LabEdge, made: Release) -> str:
    never = f"{made.images.registry.address}/revision-test@sha256:{uuid.uuid4().hex * 2}"
    rewrite_last_good(edge, images={"app": never})
    return "image app"


def env_copy_missing(edge: LabEdge, made: Release) -> str:
    kept_env(edge).unlink()
    return ".env copy"


def env_copy_changed(edge: LabEdge, made: Release) -> str:
    kept_env(edge).write_text("MODE=good\nOTHER=1\n")
    return ".env copy"


MISSING: dict[str, Callable[[LabEdge, Release], str]] = {
    "commit-gone": commit_gone,
    "image-digest-gone": image_gone,
    "env-copy-missing": env_copy_missing,
    "env-copy-changed": env_copy_changed,
}


async def host_snapshot(edge: LabEdge) -> dict[str, Any]:
    """What a rollback would change on the host, byte for byte."""
    env = checkout_of(edge.world) / ".env"
    override = override_of(edge.world)
    return {
        "head": checkout_head(edge.origin, edge.world),
        "env": env.read_bytes() if env.exists() else None,
        "override": override.read_bytes() if override.exists() else None,
        "containers": sorted(
            (c["Id"], c["Image"], c["State"]["StartedAt"])
            for c in await project_containers(edge.docker)
        ),
    }


async def failed_under_notify(edge: LabEdge, release: Release, memo: ComposeMemo) -> None:
    """A good release verified, then a bad one that failed under ``notify``: switched to
    ``auto``, the next cycle's rollback is due."""
    use_policy(edge, release, "notify")
    first = await cycle(edge, memo)
    assert found(first)["health"] == "healthy", found(first).get("unhealthy")
    env_value_bad(release)
    bad = await cycle(edge, memo)
    assert found(bad)["health"] == "unhealthy"


@pytest.mark.parametrize("missing", sorted(MISSING))
async def test_a_rollback_missing_a_part_changes_nothing_and_says_so_once(
    edge: LabEdge,
    release: Release,
    memo: ComposeMemo,
    missing: str,
) -> None:
    await failed_under_notify(edge, release, memo)
    part = MISSING[missing](edge, release)
    use_policy(edge, release, "auto")
    before = await host_snapshot(edge)

    runs = [await cycle(edge, memo) for _ in range(3)]

    after = await host_snapshot(edge)
    assert after == before
    assert [run.actions for run in runs] == [[], [], []]
    assert all(part in found(run)["rollback_blocked"] for run in runs)
    assert all(notices(run, NoticeKind.ROLLED_BACK) == [] for run in runs)
    told = [notices(run, NoticeKind.ROLLBACK_BLOCKED) for run in runs]
    assert [len(t) for t in told] == [1, 0, 0]
    assert part in told[0][0]


async def test_sync_git_leaves_a_blocked_rollbacks_checkout_and_redis_forgetting_tells_again(
    edge: LabEdge, release: Release, memo: ComposeMemo, redis: Redis
) -> None:
    """A pin on the Marquee makes sync_git read the holds: the rolled back Playground's checkout
    is still left to the rollback, which cannot be made. Redis forgetting what was told tells
    it once more."""
    await failed_under_notify(edge, release, memo)
    await take_pin(redis, "edge-1", Pin.taken_now("elsewhere", LAST_GOOD, "test"), 2.0)
    env_copy_missing(edge, release)
    use_policy(edge, release, "auto")
    before = await host_snapshot(edge)

    runs = [await cycle(edge, memo) for _ in range(2)]
    await redis.delete(rollback_blocked_key("edge-1"))
    again = await cycle(edge, memo)

    assert await host_snapshot(edge) == before
    assert not [a for run in [*runs, again] for a in run.actions if "playground web-main" in a]
    assert [len(notices(run, NoticeKind.ROLLBACK_BLOCKED)) for run in runs] == [1, 0]
    assert notices(again, NoticeKind.ROLLBACK_BLOCKED) == notices(
        runs[0], NoticeKind.ROLLBACK_BLOCKED
    )


async def test_a_plan_records_nothing_told_so_the_daemons_detect_cycle_tells_a_blocked_rollback(
    edge: LabEdge, release: Release, memo: ComposeMemo, redis: Redis
) -> None:
    """``plan`` is a dry run that sends nothing: it shows a blocked rollback every time and
    records nothing as told. A ``detect`` cycle of the daemon is a dry run whose notices are
    sent: it tells the same news once (a plan before it marked it told, and no one heard)."""
    await failed_under_notify(edge, release, memo)
    env_copy_missing(edge, release)
    use_policy(edge, release, "auto")
    before = await host_snapshot(edge)

    plans = [await cycle(edge, memo, dry_run=True, tells=False) for _ in range(2)]
    told_after_plans = await redis.hgetall(rollback_blocked_key("edge-1"))
    detects = [await cycle(edge, memo, dry_run=True) for _ in range(2)]

    assert await host_snapshot(edge) == before
    assert [len(notices(run, NoticeKind.ROLLBACK_BLOCKED)) for run in plans] == [1, 1]
    assert told_after_plans == {}
    assert [len(notices(run, NoticeKind.ROLLBACK_BLOCKED)) for run in detects] == [1, 0]
    assert notices(detects[0], NoticeKind.ROLLBACK_BLOCKED) == notices(
        plans[0], NoticeKind.ROLLBACK_BLOCKED
    )
    assert list(await redis.hgetall(rollback_blocked_key("edge-1"))) == [b"web-main"]


def in_checkout(edge: LabEdge, commit: str) -> bool:
    checkout = str(checkout_of(edge.world))
    asked = ["git", "-C", checkout, "--git-dir=.git", "cat-file", "-e", f"{commit}^{{commit}}"]
    return subprocess.run(asked, capture_output=True, check=False).returncode == 0


@dataclass
class Probe:
    """A phase that only asks ``check_revision`` about ``revision``, as a rollback from the
    checkout as it is would."""

    revision: Revision
    missing: tuple[str, ...] | None = None
    name: str = "probe"

    async def __call__(self, ctx: PhaseContext[RemoteSession]) -> PhaseReport:
        session = await ctx.remote()
        [playground] = ctx.inventory.playgrounds_on(ctx.marquee.name)
        playspec = ctx.inventory.playspec_of(playground)
        self.missing = await check_revision(
            session, checkout=checkout_dir(ctx.marquee, playground.name), repo=playspec.repo,
            revision=self.revision, now_commit=None, now_env=ABSENT_FILE,
            env_copy_path=kept_env_path(ctx.marquee, playground.name),
            registry=ctx.inventory.registry_of(playspec),
        )  # fmt: skip
        return PhaseReport()


async def test_the_check_has_a_commit_only_the_origin_serves_and_a_digest_only_its_registry_has(
    edge: LabEdge, release: Release, memo: ComposeMemo, images: Images
) -> None:
    use_policy(edge, release, "auto")
    assert found(await cycle(edge, memo))["health"] == "healthy"
    later = edge.origin.commit(f"{release.branch}-later", {"later": "1\n"}, "not in the checkout")
    only_there = f"playguard-test/{uuid.uuid4().hex}:only-in-the-registry"
    build_busybox_image(images.docker, only_there, env={"ONLY": uuid.uuid4().hex})
    pushed = images.push(only_there, f"only-{uuid.uuid4().hex[:8]}")
    [digest] = json.loads(images.docker.cli("image", "inspect", pushed))[0]["RepoDigests"]
    images.docker.cli("rmi", "--force", only_there, pushed)
    env_copy = kept_env(edge).read_text().encode()
    recorded = hashlib.sha256(env_copy).hexdigest()
    never = f"{images.registry.address}/revision-test@sha256:{uuid.uuid4().hex * 2}"
    gone = "0123456789" * 4

    assert not in_checkout(edge, later)
    had = Probe(Revision(later, {"app": digest}, recorded))
    missed = Probe(Revision(gone, {"app": digest, "db": never}, recorded))
    await edge.run(had)
    await edge.run(missed)

    assert not in_checkout(edge, later), "the check fetched into the checkout"
    assert had.missing == ()
    assert missed.missing is not None
    assert [part.split(" ", 2)[:2] for part in missed.missing] == [
        ["commit", gone[:12]],
        ["image", f"db={never}"],
    ]
