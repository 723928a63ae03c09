"""``plan`` is the next cycle: on the lab's real hosts, for each kind of case, the actions
``plan --json`` lists are the actions the cycle that follows takes (same kinds, same objects,
same order), and ``plan`` exits 0 exactly when that cycle takes none (a paused Marquee, where
neither acts, is an error for ``plan``, as README says)."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import aiodocker
import pytest

from playguard_lab import DockerDaemon, LabCommandFailed, RegistryServer, push_image
from tests.support.cli import EXIT_NOT_OK, LAB_SETTINGS, Playguard
from tests.support.playgrounds import project_containers
from tests.support.world import LabWorld

pytestmark = pytest.mark.integration

EXIT_CHANGES = 2


def actions_of(changes: dict[str, list[str]]) -> list[str]:
    """Each phase's actions in phase order, a dry run's ``would`` left off."""
    return [re.sub(r"^would ", "", action) for taken in changes.values() for action in taken]


def plan(playguard: Playguard) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    done = playguard("plan", "edge-1", "--json", timeout=180.0)
    return done, actions_of(json.loads(done.stdout).get("changes", {}))


def cycle(playguard: Playguard) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    done = playguard("cycle", "edge-1", "--json", timeout=180.0)
    return done, actions_of(json.loads(done.stdout)["cycle"]["actions"])


def converged(playguard: Playguard) -> None:
    done, _ = cycle(playguard)
    assert done.returncode == 0, done.stdout + done.stderr


@dataclass
class Lab:
    """The lab's servers a case sets up its world on; ``lacking`` the images it made the host
    lack, untagged when the test ends."""

    playguard: Playguard
    world: LabWorld
    docker: aiodocker.Docker
    daemon: DockerDaemon
    registry: RegistryServer
    image: str
    lacking: list[str]


@pytest.fixture
def here(
    playguard: Playguard, lab: LabWorld, lab_docker: aiodocker.Docker,
    docker_daemon: DockerDaemon, registry: RegistryServer, busybox_image: str,
) -> Iterator[Lab]:  # fmt: skip
    made = Lab(playguard, lab, lab_docker, docker_daemon, registry, busybox_image, [])
    yield made
    for image in made.lacking:  # only untags: the image is the lab's busybox under a new name
        with contextlib.suppress(LabCommandFailed):
            docker_daemon.cli("rmi", image)


async def new_marquee(here: Lab) -> None:
    """Never converged: no checkout, no container."""


async def new_marquee_lacking_an_image(here: Lab) -> None:
    """Never converged, and the host lacks an image its Playspec lists and its chat runs: the
    cycle pulls it once (pull_images), the chat then finds it there."""
    repository = f"playguard/plan-{uuid.uuid4().hex[:12]}:1"
    image = push_image(here.daemon, here.registry, here.image, repository)
    here.daemon.cli("rmi", image)
    here.lacking.append(image)
    here.world.data["playspecs"][0]["images"] = [image]
    here.world.data["agent_chats"][0]["image"] = image
    here.playguard.configure(here.world.data, **LAB_SETTINGS)


async def container_removed(here: Lab) -> None:
    converged(here.playguard)
    [app] = await project_containers(here.docker)
    await here.docker.containers.container(app["Id"]).delete(force=True)


async def pinned_at_last_good(here: Lab) -> None:
    converged(here.playguard)
    pinned = here.playguard(
        "pin", "edge-1", "web-main", "--revision", "last-good", "--reason", "demo"
    )
    assert pinned.returncode == 0, pinned.stderr


async def paused(here: Lab) -> None:
    converged(here.playguard)
    taken = here.playguard("pause", "edge-1", "--for", "1h", "--reason", "incident 7")
    assert taken.returncode == 0, taken.stderr


CASES: dict[str, tuple[Callable[[Lab], Awaitable[None]], str | None]] = {
    "new marquee": (new_marquee, "released web-main: first deploy at "),
    "new marquee lacking an image": (new_marquee_lacking_an_image, "released web-main: first "),
    "drift: a container removed by hand": (container_removed, "fixed drift web-main: app: missing"),
    "pinned at last-good": (pinned_at_last_good, None),
    "paused": (paused, None),
}
"""Case -> how the lab gets there, and what ``history`` says the next cycle did, in the
glossary's words (None: nothing)."""


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_plan_lists_the_actions_the_next_cycle_takes(here: Lab, case: str) -> None:
    setup, said = CASES[case]
    await setup(here)
    playguard = here.playguard

    planned, listed = plan(playguard)
    ran, taken = cycle(playguard)
    history = playguard("history", "edge-1", "--limit", "1").stdout

    assert listed == taken, planned.stdout
    assert len(set(listed)) == len(listed), "nothing planned twice"
    assert bool(taken) is (said is not None)
    if said is not None:
        assert said in " ".join(history.split()), history
    if case == "paused":
        assert (planned.returncode, ran.returncode) == (1, EXIT_NOT_OK)
        return
    assert planned.returncode == (EXIT_CHANGES if taken else 0), planned.stdout + planned.stderr
    assert ran.returncode == 0, ran.stdout + ran.stderr
    after, nothing = plan(playguard)
    assert (after.returncode, nothing) == (0, []), after.stdout
