"""The health gate, last good and rollback against the lab: compose over SSH, the lab's dockerd
and registry, images made with ``docker import`` that a healthcheck in the compose file passes on
(``HEALTHY`` set in the image) or fails on (not set)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiodocker
import pytest

from playguard_async.cycle_record import NoticeKind
from playguard_async.phases.pull_images import pull_images
from playguard_async.phases.reconcile_playgrounds import reconcile_playgrounds
from playguard_async.phases.sync_git import sync_git
from playguard_async.remote.last_good import HealthRecord
from playguard_lab import DockerDaemon, RegistryServer, build_busybox_image, push_image
from tests.support.edge import LabEdge
from tests.support.playgrounds import (
    compose_yaml,
    found,
    notices,
    running,
    set_playground,
)
from tests.support.world import LAB_OPTIONS, PhaseRun

pytestmark = pytest.mark.integration

HEALTH_TEST = ["CMD", "/bin/sh", "-c", "env | grep -q ^HEALTHY=yes"]
"""Passes in an image that sets HEALTHY, fails (no output, status 1) in one that does not."""

CYCLE = (sync_git, pull_images, reconcile_playgrounds)


@dataclass
class Tags:
    """A repository of the lab registry of the test's own, with a good and a bad tag."""

    docker: DockerDaemon
    registry: RegistryServer
    repository: str
    local_tags: list[str]

    def ref(self, tag: str) -> str:
        return f"{self.registry.address}/{self.repository}:{tag}"

    def push(self, tag: str, *, healthy: bool) -> None:
        """A fresh image (a marker in its config makes each one different) under ``tag``."""
        local = f"playguard-test/{uuid.uuid4().hex}:local"
        env = {"MARKER": uuid.uuid4().hex} | ({"HEALTHY": "yes"} if healthy else {})
        build_busybox_image(self.docker, local, env=env)
        self.local_tags.append(local)
        push_image(self.docker, self.registry, local, f"{self.repository}:{tag}")


@pytest.fixture
def tags(docker_daemon: DockerDaemon, registry: RegistryServer) -> Iterator[Tags]:
    made = Tags(docker_daemon, registry, f"health-{uuid.uuid4().hex[:8]}", [])
    made.push("good", healthy=True)
    made.push("bad", healthy=False)
    yield made
    for local in made.local_tags:
        docker_daemon.cli("rmi", "--force", local)


def on_tag(edge: LabEdge, tags: Tags, tag: str, branch: str | None = None, **compose: Any) -> str:
    """The Playground's compose file names ``tag``, with the health test: committed to its own
    branch (a new one unless ``branch`` is given)."""
    branch = branch or f"test-{uuid.uuid4().hex[:10]}"
    text = compose_yaml(
        tags.ref(tag), healthcheck=compose.pop("healthcheck", HEALTH_TEST), **compose
    )
    edge.origin.commit(branch, {"compose.yaml": text}, f"On {tag}")
    set_playground(edge.world, branch=branch)
    return branch


def use_policy(edge: LabEdge, tags: Tags, rollback: str, health_timeout: float = 4) -> None:
    edge.world.data["playspecs"][0].update(
        images=[tags.ref("good"), tags.ref("bad")], rollback=rollback, health_timeout=health_timeout
    )


async def cycle(edge: LabEdge, **options: Any) -> PhaseRun:
    ran: PhaseRun = await edge.runner(CYCLE, edge.world, options=replace(LAB_OPTIONS, **options))
    return ran


async def digest_of(docker: aiodocker.Docker, reference: str) -> str:
    digests: list[str] = (await docker.images.inspect(reference))["RepoDigests"]
    return sorted(digests)[0]


async def test_auto_rolls_a_bad_tag_back_to_the_last_good_digest_and_does_not_flap(
    edge: LabEdge, tags: Tags
) -> None:
    use_policy(edge, tags, "auto")
    branch = on_tag(edge, tags, "good")
    first = await cycle(edge)
    good = await running(edge.docker)
    good_digest = await digest_of(edge.docker, tags.ref("good"))
    on_tag(edge, tags, "bad", branch)

    bad = await cycle(edge)

    assert found(first)["health"] == "healthy", found(first)["unhealthy"]
    assert found(first)["last_good"] == f"app={good_digest}"
    assert found(bad)["health"] == "unhealthy"
    assert list(found(bad)["unhealthy"]) == ["app"]
    assert found(bad)["rollback"].startswith(f"rolled back to app={good_digest} at ")
    assert " because app: " in found(bad)["rollback"]
    assert found(bad)["rollback_health"] == "healthy"
    assert notices(bad, NoticeKind.UNHEALTHY)[0].startswith("app: ")
    assert notices(bad, NoticeKind.ROLLED_BACK) == [found(bad)["rollback"]]
    assert bad.report.unhealthy is not None
    assert "rolled back to" in bad.report.unhealthy
    after = await running(edge.docker)
    assert after["Image"] == good["Image"]
    assert after["Config"]["Image"] == good_digest
    assert after["State"]["Health"]["Status"] == "healthy"

    later = [await cycle(edge) for _ in range(3)]

    assert [run.actions for run in later] == [[], [], []]
    assert (await running(edge.docker))["Id"] == after["Id"]
    assert all(found(run)["rollback"] == found(bad)["rollback"] for run in later)
    assert all(notices(run, NoticeKind.ROLLED_BACK) == [] for run in later)  # it happened once
    assert all(notices(run, NoticeKind.UNHEALTHY) == [found(bad)["rollback"]] for run in later)
    assert all(run.report.unhealthy for run in later)  # still held back: the outcome says so

    tags.push("bad", healthy=True)
    fixed = await cycle(edge)

    assert found(fixed)["health"] == "healthy"
    fixed_digest = await digest_of(edge.docker, tags.ref("bad"))
    assert found(fixed)["last_good"] == f"app={fixed_digest}"
    assert "rollback" not in found(fixed)
    assert fixed.report.unhealthy is None
    assert (await running(edge.docker))["Config"]["Image"] == tags.ref("bad")


async def test_notify_leaves_the_bad_playground_and_reports_it_without_recreating_it(
    edge: LabEdge, tags: Tags
) -> None:
    use_policy(edge, tags, "notify")
    branch = on_tag(edge, tags, "good")
    await cycle(edge)
    on_tag(edge, tags, "bad", branch)

    bad = await cycle(edge)
    container = await running(edge.docker)
    later = [await cycle(edge, stuck_after=0.0) for _ in range(3)]

    assert found(bad)["health"] == "unhealthy"
    assert "rollback" not in found(bad)
    assert container["Config"]["Image"] == tags.ref("bad")
    assert [run.actions for run in later] == [[], [], []]
    assert (await running(edge.docker))["Id"] == container["Id"]
    assert all(found(run)["health"] == "held" for run in later)
    assert all("not retried until they change" in found(run)["held"] for run in later)
    assert all(run.report.unhealthy for run in [bad, *later])


async def test_a_rollback_cut_after_the_failure_was_recorded_is_finished_by_the_next_cycle(
    edge: LabEdge, tags: Tags
) -> None:
    """A lease lost between the record of the failed release and the rollback leaves the host as
    a ``notify`` cycle does: the next ``auto`` cycle puts back the last good commit and images
    and verifies them, and the one after has nothing to do."""
    use_policy(edge, tags, "notify")
    branch = on_tag(edge, tags, "good")
    await cycle(edge)
    good_digest = await digest_of(edge.docker, tags.ref("good"))
    on_tag(edge, tags, "bad", branch)
    await cycle(edge)
    use_policy(edge, tags, "auto")

    finished = await cycle(edge)
    after = await cycle(edge)

    assert finished.actions[0].startswith("check out playground web-main at ")
    assert finished.actions[-1] == (
        "compose up playground web-main (roll back to its last good revision)"
    )
    assert found(finished)["health"] == "healthy"
    assert notices(finished, NoticeKind.ROLLED_BACK) == [found(finished)["rollback"]]
    assert found(finished)["rollback"].startswith(f"rolled back to app={good_digest} at ")
    assert (await running(edge.docker))["Config"]["Image"] == good_digest
    assert after.actions == []
    assert notices(after, NoticeKind.ROLLED_BACK) == []


async def test_off_reports_the_unhealthy_playground_but_leaves_the_outcome_alone(
    edge: LabEdge, tags: Tags
) -> None:
    use_policy(edge, tags, "off")
    on_tag(edge, tags, "bad")

    bad = await cycle(edge)

    assert found(bad)["health"] == "unhealthy"
    assert notices(bad, NoticeKind.UNHEALTHY)
    assert bad.report.unhealthy is None


async def test_crash_looping_service_is_caught_like_a_failing_healthcheck(
    edge: LabEdge, tags: Tags
) -> None:
    use_policy(edge, tags, "notify", health_timeout=60)
    on_tag(edge, tags, "good", command=["sh", "-c", "echo starting; exit 3"])

    crashed = await cycle(edge)
    again = await cycle(edge)

    assert found(crashed)["health"] == "unhealthy"
    assert found(crashed)["unhealthy"] == {"app": "exited: status 3"}
    assert again.actions == []  # its exited container is not brought up again and again
    assert found(again)["health"] == "held"


def crashes_unless_healthy(after: float) -> list[str]:
    """A command that runs on the ``good`` image (it sets HEALTHY) and, on the ``bad`` one,
    exits with status 3 ``after`` seconds after each start."""
    script = f"env | grep -q ^HEALTHY=yes && exec sleep 86400; sleep {after}; exit 3"
    return ["/bin/sh", "-c", script]


async def test_a_service_docker_keeps_restarting_fails_by_its_restarts_and_is_rolled_back(
    edge: LabEdge, tags: Tags
) -> None:
    """Under ``restart: always`` a crashing service is never ``exited``: its third restart fails
    the gate (a minute's health_timeout is not what ends it), the rollback runs in the same
    cycle, and the next cycle does not bring the failed inputs up again."""
    use_policy(edge, tags, "auto", health_timeout=60)
    loop: dict[str, Any] = {"command": crashes_unless_healthy(0), "restart": "always"}
    branch = on_tag(edge, tags, "good", **loop)
    first = await cycle(edge)
    good_digest = await digest_of(edge.docker, tags.ref("good"))
    on_tag(edge, tags, "bad", branch, **loop)

    bad = await cycle(edge)
    after = await cycle(edge)

    assert found(first)["health"] == "healthy"
    assert found(bad)["health"] == "unhealthy"
    assert list(found(bad)["unhealthy"]) == ["app"]
    assert re.fullmatch(r"restarted: \d+ times; starting.*", found(bad)["unhealthy"]["app"])
    assert found(bad)["rollback"].startswith(f"rolled back to app={good_digest} at ")
    assert " because app: restarted: " in found(bad)["rollback"]
    assert found(bad)["rollback_health"] == "healthy"
    assert notices(bad, NoticeKind.ROLLED_BACK) == [found(bad)["rollback"]]
    assert after.actions == []
    container = await running(edge.docker)
    assert container["Config"]["Image"] == good_digest
    assert (container["State"]["Status"], container["RestartCount"]) == ("running", 0)


async def test_a_slow_crash_loop_fails_at_the_timeout_not_counted_from_its_last_restart(
    edge: LabEdge, tags: Tags
) -> None:
    """A service that dies 10.2 s after each start, past Docker's 10 s backoff reset, comes back
    0.1 s later under ``restart: always``: it is never ``exited`` and its ``StartedAt`` is never
    more than about 10.5 s old. Counted from that, a 13 s health_timeout never came and the gate
    polled until the lease ended, ``pending``, for the next cycle to recreate it and do the same.
    Counted from the container's creation, the gate fails, and the next cycle holds the inputs."""
    use_policy(edge, tags, "notify", health_timeout=13)
    on_tag(edge, tags, "bad", command=crashes_unless_healthy(10.2), restart="always")

    crashed = await cycle(edge)
    again = await cycle(edge)

    assert found(crashed)["health"] == "unhealthy"
    assert list(found(crashed)["unhealthy"]) == ["app"]
    assert notices(crashed, NoticeKind.UNHEALTHY)
    assert crashed.report.unhealthy is not None
    assert again.actions == []
    assert found(again)["health"] == "held"


@pytest.mark.parametrize(
    ("grace", "health"), [(0.5, "healthy"), (3600.0, "unhealthy")], ids=["grace-over", "in-grace"]
)
async def test_service_without_healthcheck_is_healthy_once_running_for_health_grace(
    edge: LabEdge, tags: Tags, grace: float, health: str
) -> None:
    use_policy(edge, tags, "notify", health_timeout=2)
    on_tag(edge, tags, "bad", healthcheck=False)

    run = await cycle(edge, health_grace=grace)

    assert found(run)["health"] == health
    if health == "unhealthy":
        assert found(run)["unhealthy"]["app"].startswith("starting: running ")


HOSTILE_RECORDS = {
    "not-json": b"{{{ not json\n",
    "binary": b"\x00\xff\xfe\x1b[31m\n",
    "wrong-shape": b'{"last_good": {"inputs": 1}, "failed": []}\n',
    "huge-line": b'{"failed": {"inputs": "' + b"f" * 2_000_000 + b'", "reason": "x"}}\n',
    "empty": b"",
}
"""A health record file on the host that playguard did not write as it is."""


@pytest.mark.parametrize("case", sorted(HOSTILE_RECORDS))
async def test_a_record_file_not_of_the_written_form_reads_as_none_and_is_rewritten(
    edge: LabEdge, tags: Tags, case: str
) -> None:
    use_policy(edge, tags, "auto")
    on_tag(edge, tags, "good")
    first = await cycle(edge)
    record = Path(edge.world.data["marquees"][0]["state_dir"]) / "playgrounds" / "web-main.json"
    record.write_bytes(HOSTILE_RECORDS[case])

    run = await cycle(edge)

    assert found(run)["health"] == "healthy"  # not verified any more: the gate ran again
    assert found(run)["last_good"] == found(first)["last_good"]
    assert run.actions == ["record the health of playground web-main"]
    assert HealthRecord.parse(record.read_text()).last_good is not None


HOSTILE_OUTPUT = {
    "terminal-markup": (r"printf '\033[31mred\033[0m \033]0;title\007tail\n'", "red tail"),
    "control-characters": (r"printf 'a\001b\177c tail\n'", r"a\x01b\x7fc tail"),
    "invalid-utf8": (r"printf 'bad\377\376 tail\n'", "tail"),
    "megabyte-line": (r"head -c 1000000 /dev/zero | tr '\000' x; echo", "xxx..."),
    "secret": (r"printf 'token=%s\n' '{password}'", "token=***"),
}
"""Health check output (script, what the finding shows of it): Docker keeps 4 KiB of it, the
finding one clean line of at most 300 characters."""


@pytest.mark.parametrize("case", sorted(HOSTILE_OUTPUT))
async def test_health_log_line_from_the_host_shows_bounded_and_clean(
    edge: LabEdge, tags: Tags, case: str
) -> None:
    script, expected = HOSTILE_OUTPUT[case]
    password = edge.world.password_file.read_text().strip()
    test = ["CMD", "/bin/sh", "-c", f"{script.replace('{password}', password)}; exit 1"]
    use_policy(edge, tags, "off", health_timeout=3)
    on_tag(edge, tags, "good", healthcheck=test)

    run = await cycle(edge)

    detail = found(run)["unhealthy"]["app"]
    assert detail.startswith("unhealthy: ")
    assert expected in detail
    assert len(detail) <= len("unhealthy: ") + 300
    assert not any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in detail)
    assert password not in detail
