"""``plan`` is the next cycle: on the lab's real hosts, for each kind of case, the actions
``plan --json`` lists are the actions the cycle that follows takes (same kinds, same objects,
same order), and ``plan`` exits 0 exactly when that cycle takes none (a paused Marquee, where
neither acts, is an error for ``plan``, as README says)."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiodocker
import pytest

from playguard_lab import (
    DockerDaemon,
    GitOrigin,
    LabCommandFailed,
    RegistryServer,
    build_busybox_image,
    push_image,
)
from tests.support.cli import EXIT_NOT_OK, LAB_SETTINGS, Playguard
from tests.support.plan_cycle import EXIT_CHANGES, converged, cycle, plan
from tests.support.playgrounds import checkout_of, compose_yaml, project_containers
from tests.support.world import LabWorld

pytestmark = pytest.mark.integration


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
    origin: GitOrigin
    lacking: list[str]

    @property
    def branch(self) -> str:
        return str(self.world.data["playgrounds"][0]["branch"])

    def release(self, compose: str, message: str = "A release") -> str:
        """A new commit on the Playground's branch, its compose file ``compose``."""
        return self.origin.commit(self.branch, {"compose.yaml": compose}, message)

    def configure(self) -> None:
        self.playguard.configure(self.world.data, **LAB_SETTINGS)


@pytest.fixture
def here(
    playguard: Playguard, lab: LabWorld, lab_docker: aiodocker.Docker,
    docker_daemon: DockerDaemon, registry: RegistryServer, busybox_image: str,
    git_origin: GitOrigin,
) -> Iterator[Lab]:  # fmt: skip
    made = Lab(playguard, lab, lab_docker, docker_daemon, registry, busybox_image, git_origin, [])
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


async def new_commit(here: Lab) -> None:
    """A release: the branch moved, its compose file with it; a plan that did not read the
    compose file at the new commit listed the update and not the ``up`` after it."""
    converged(here.playguard)
    here.release(compose_yaml(here.image, sleep="86401"))


async def new_image_behind_a_tag(here: Lab) -> None:
    """A release: the registry serves a new image behind the tag the Playspec names, which
    the host has not pulled yet (its tag is put back on the image the Playground runs)."""
    tag = f"playguard/plan-{uuid.uuid4().hex[:12]}:1"
    image = push_image(here.daemon, here.registry, here.image, tag)
    here.lacking.append(image)
    here.world.data["playspecs"][0]["images"] = [image]
    here.release(compose_yaml(image), "Run the tagged image")
    here.configure()
    converged(here.playguard)
    running = here.daemon.cli("image", "inspect", "--format", "{{.Id}}", image).strip()
    rebuilt = f"playguard-lab/plan-{uuid.uuid4().hex[:12]}:local"
    build_busybox_image(here.daemon, rebuilt, env={"RELEASE": "2"})
    here.lacking.append(rebuilt)
    push_image(here.daemon, here.registry, rebuilt, tag)
    here.daemon.cli("tag", running, image)


async def pinned_at_a_commit(here: Lab) -> None:
    """A pin at a commit the Playground does not run (one of another branch)."""
    converged(here.playguard)
    other = here.origin.commit(
        f"pin-{uuid.uuid4().hex[:10]}",
        {"compose.yaml": compose_yaml(here.image, sleep="86402")},
        "Where the pin goes",
    )
    pinned = here.playguard("pin", "edge-1", "web-main", "--revision", other, "--reason", "demo")
    assert pinned.returncode == 0, pinned.stderr


async def rollback_due(here: Lab) -> None:
    """A rollback the cycle must finish: a release failed its health gate and was rolled back,
    then its checkout was put back on the failed commit (as a lease lost midway leaves it)."""
    here.world.data["playspecs"][0]["rollback"] = "auto"
    here.configure()
    converged(here.playguard)
    failed = here.release(compose_yaml(here.image, command=["false"]), "A release that exits")
    rolled_back = cycle(here.playguard)[1]
    assert any("roll back" in action for action in rolled_back), rolled_back
    here.origin.git("-C", str(checkout_of(here.world)), "reset", "--quiet", "--hard", failed)


async def held_by_a_rollout(here: Lab) -> None:
    """A release its rollout has not admitted edge-1 to yet, on two real Marquees: the canary,
    edge-0 (a workdir and fence of its own on the lab's host), is the first wave; its plan lists
    the release, its cycle takes it, and edge-1 waits in the second wave for the bake."""
    edge = here.world.data["marquees"][0]
    workdir = Path(edge["workdir"]).with_name("workdir-canary")
    here.world.data["marquees"].append(
        {**edge, "name": "edge-0", "canary": True,
         "workdir": str(workdir), "state_dir": f"{workdir}-state"}
    )  # fmt: skip
    here.world.data["playgrounds"].append(
        {**here.world.data["playgrounds"][0], "name": "web-canary", "marquee": "edge-0"}
    )
    here.world.data["agent_chats"] = []
    here.configure()
    converged(here.playguard)
    converged(here.playguard, "edge-0")
    here.world.data["playspecs"][0]["rollout"] = {"waves": [1, "100%"], "bake": 3600}
    here.configure()
    here.release(compose_yaml(here.image, sleep="86404"))

    planned, listed = plan(here.playguard, "edge-0")
    ran, taken = cycle(here.playguard, "edge-0")
    history = here.playguard("history", "edge-0", "--limit", "1").stdout
    assert listed == taken, planned.stdout
    assert any(action.startswith("update playground web-canary") for action in taken), taken
    assert (planned.returncode, ran.returncode) == (EXIT_CHANGES, 0), planned.stdout + ran.stdout
    assert "released web-canary: commit " in " ".join(history.split()), history


async def outside_a_window(here: Lab) -> None:
    """A release waits for the Marquee's maintenance window: the next cycle runs as a detect
    and lists what the plan lists, changing nothing."""
    converged(here.playguard)
    here.world.data["marquees"][0]["windows"] = [
        {"kind": "allow", "cron": "0 0 1 1 *", "duration": 60, "timezone": "UTC"}
    ]
    here.configure()
    here.release(compose_yaml(here.image, sleep="86403"))


@dataclass(frozen=True)
class Case:
    """How the lab gets there (``setup``), what ``history`` says the next cycle did in the
    glossary's words (None: nothing), and the exit statuses of ``plan`` and ``cycle`` where
    they are not the rule's (the plan: 2 with changes, 0 without; the cycle: 0)."""

    setup: Callable[[Lab], Awaitable[None]]
    said: str | None
    exits: tuple[int, int] | None = None
    held: str | None = None
    """What the plan says holds web-main, in part (None: nothing holds it)."""


CASES: dict[str, Case] = {
    "new marquee": Case(new_marquee, "released web-main: first deploy at "),
    "new marquee lacking an image": Case(new_marquee_lacking_an_image, "released web-main: first "),
    "drift: a container removed by hand": Case(
        container_removed, "fixed drift web-main: app: missing"
    ),
    "pinned at last-good": Case(pinned_at_last_good, None, held="pinned"),
    # A paused Marquee: neither acts, and that is an error for plan (README).
    "paused": Case(paused, None, (1, EXIT_NOT_OK)),
    "release: a new commit": Case(new_commit, "released web-main: commit "),
    "release: a new image behind a tag": Case(
        new_image_behind_a_tag, "released web-main: an image"
    ),
    "pinned at a commit": Case(pinned_at_a_commit, "applied pin web-main", held="pinned"),
    # Rolled back, the Marquee is unhealthy: an error for plan, not ok for cycle, every cycle.
    "rollback due": Case(rollback_due, "web-main: rolled back to ", (1, EXIT_NOT_OK)),
    "held by a rollout": Case(held_by_a_rollout, None, held="held by rollout web@"),
    # The cycle is a detect: it lists what the plan lists, and changes nothing.
    "outside a window": Case(outside_a_window, None, (EXIT_CHANGES, 0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_plan_lists_the_actions_the_next_cycle_takes(here: Lab, case: str) -> None:
    expected = CASES[case]
    await expected.setup(here)
    playguard = here.playguard

    planned, listed = plan(playguard)
    ran, taken = cycle(playguard)
    history = playguard("history", "edge-1", "--limit", "1").stdout

    assert listed == taken, planned.stdout
    if case != "paused":
        held = json.loads(planned.stdout)["held"].get("web-main")
        assert (held is None) if expected.held is None else (expected.held in held), held
    assert len(set(listed)) == len(listed), "nothing planned twice"
    detect = json.loads(ran.stdout)["cycle"]["dry_run"]
    assert detect is (case == "outside a window"), ran.stdout
    assert bool(taken) is (expected.said is not None or detect)
    if expected.said is not None:
        assert expected.said in " ".join(history.split()), history
    exits = expected.exits or (EXIT_CHANGES if taken else 0, 0)
    assert (planned.returncode, ran.returncode) == exits, planned.stdout + ran.stdout
    if case == "paused":
        return
    after, then = plan(playguard)
    assert then == (listed if detect else []), after.stdout
    assert after.returncode == (exits[0] if expected.exits else 0), after.stdout
