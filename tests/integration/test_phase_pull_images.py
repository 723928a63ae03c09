"""pull_images against the lab: the lab's registry with auth, and the lab's dockerd as the host.

Each test pushes images of its own to a repository of its own, so moving its tag cannot change what
other tests pull. The dockerd that pushes is also the one the phase pulls into: a test makes the
host's copy stale by pointing the local tag back at the older image, as if another machine had
pushed the newer one.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import aiodocker
import pytest
from structlog.testing import capture_logs

from playguard_async.phases.protocol import PartialFailure
from playguard_async.phases.pull_images import pull_images
from playguard_lab import DockerDaemon, LabCommandFailed, RegistryServer, push_image
from tests.support.edge import LabEdge
from tests.support.phase_checks import everything_said, write_wrong_password

pytestmark = pytest.mark.integration


@dataclass
class PushedRepository:
    """A repository of the lab registry that only one test pushes to."""

    docker: DockerDaemon
    registry: RegistryServer
    repository: str
    local_tags: list[str]

    @property
    def reference(self) -> str:
        return f"{self.registry.address}/{self.repository}:1"

    def push_new_image(self) -> str:
        """Build an image unlike any other (one file holding a fresh marker) and push it to
        ``reference``, logging in with --password-stdin; returns its local tag."""
        marker = uuid.uuid4().hex
        local_tag = f"playguard-test/{marker}:local"
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w") as tar:
            info = tarfile.TarInfo("marker")
            info.size = len(marker)
            tar.addfile(info, io.BytesIO(marker.encode()))
        self.docker.cli("import", "-", local_tag, stdin=layer.getvalue())
        self.local_tags.append(local_tag)
        push_image(self.docker, self.registry, local_tag, f"{self.repository}:1")
        return local_tag


@pytest.fixture
def pushed_repository(
    docker_daemon: DockerDaemon, registry: RegistryServer, edge: LabEdge
) -> Iterator[PushedRepository]:
    """A fresh repository holding one pushed image, made the playspec's only image; the host's
    tags of it are removed after the test."""
    repository = PushedRepository(
        docker_daemon, registry, f"playguard/pull-{uuid.uuid4().hex[:12]}", []
    )
    repository.push_new_image()
    edge.world.data["playspecs"][0]["images"] = [repository.reference]
    yield repository
    for tag in [repository.reference, *repository.local_tags]:
        with contextlib.suppress(LabCommandFailed):
            docker_daemon.cli("rmi", tag)


@pytest.fixture
async def absent_image(edge: LabEdge, pushed_repository: PushedRepository) -> str:
    """The pushed image's reference, the host's copy of it deleted."""
    await edge.docker.images.delete(pushed_repository.reference)
    return pushed_repository.reference


async def image_id(docker: aiodocker.Docker, reference: str) -> str | None:
    try:
        image = await docker.images.inspect(reference)
    except aiodocker.DockerError as exc:
        if exc.status == 404:
            return None
        raise
    return str(image["Id"])


async def test_absent_image_is_pulled_then_left_alone(edge: LabEdge, absent_image: str) -> None:
    reference = absent_image

    first = await edge.run(pull_images)
    second = await edge.run(pull_images)

    assert first.actions == [f"pull {reference}"]
    pulled = first.report.findings["images"][reference]
    assert pulled["state"] == "pulled"
    image = await edge.docker.images.inspect(reference)
    assert f"{reference.rpartition(':')[0]}@{pulled['digest']}" in image["RepoDigests"]
    assert second.actions == []
    assert second.report.findings["images"][reference] == {
        "state": "unchanged",
        "digest": pulled["digest"],
    }


async def test_image_pushed_again_under_the_same_tag_is_pulled_again(
    edge: LabEdge, pushed_repository: PushedRepository
) -> None:
    reference = pushed_repository.reference
    older = pushed_repository.local_tags[0]
    current = await edge.run(pull_images)
    newer = pushed_repository.push_new_image()
    pushed_repository.docker.cli("tag", older, reference)
    assert await image_id(edge.docker, reference) == await image_id(edge.docker, older)

    moved = await edge.run(pull_images)

    assert current.actions == []
    assert moved.actions == [f"pull {reference}"]
    assert moved.report.findings["images"][reference]["state"] == "pulled"
    assert (
        moved.report.findings["images"][reference]["digest"]
        != current.report.findings["images"][reference]["digest"]
    )
    assert await image_id(edge.docker, reference) == await image_id(edge.docker, newer)


async def test_wrong_password_fails_clearly_and_pulls_nothing(
    edge: LabEdge, absent_image: str
) -> None:
    reference = absent_image
    wrong = write_wrong_password(edge.world.password_file)

    with capture_logs() as logs, pytest.raises(PartialFailure) as failed:
        await edge.run(pull_images)

    assert list(failed.value.failed) == [reference]
    assert f"image {reference!r} failed" in str(failed.value)
    assert failed.value.report.findings["images"][reference]["state"] == "failed"
    assert failed.value.report.actions == []
    assert await image_id(edge.docker, reference) is None
    assert wrong not in everything_said(failed.value, logs)


async def test_dry_run_says_it_would_pull_and_pulls_nothing(
    edge: LabEdge, absent_image: str
) -> None:
    reference = absent_image

    run = await edge.run(pull_images, dry_run=True)

    assert run.actions == [f"would pull {reference}"]
    assert run.report.findings["images"][reference]["state"] == "would pull"
    assert await image_id(edge.docker, reference) is None
