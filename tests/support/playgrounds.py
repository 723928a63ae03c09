"""Helpers for the playground phase tests: a branch of the lab origin per test, and reading back
what compose made on the lab's dockerd.

The git origin lives for the whole test session, so a test that commits or deletes branches works
on a branch of its own, never on ``main``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import aiodocker

from playguard_async.cycle_record import NoticeKind
from playguard_async.remote.compose import PROJECT_LABEL, override_path
from playguard_async.remote.docker import PLAYGROUND
from playguard_async.remote.git import checkout_dir
from playguard_lab import GitOrigin
from tests.support.world import LabWorld, PhaseRun

PLAYGROUND_NAME = "web-main"


def compose_yaml(
    image: str,
    *,
    sleep: str = "86400",
    healthcheck: bool | list[str] = False,
    command: list[str] | None = None,
    restart: str | None = None,
) -> str:
    """The app service of the lab's compose file; SIGKILL stops it at once (``sleep`` as PID 1
    ignores SIGTERM, and stop would wait its 10 s grace). ``healthcheck`` True is one that always
    fails, a list is its test; ``command`` replaces the ``sleep``; ``restart`` is its restart
    policy (none unless given, as compose's)."""
    app: dict[str, Any] = {
        "image": image,
        "command": command or ["sleep", sleep],
        "network_mode": "none",
        "stop_signal": "SIGKILL",
    }
    if restart is not None:
        app["restart"] = restart
    if healthcheck:
        test = ["CMD", "false"] if healthcheck is True else healthcheck
        app["healthcheck"] = {"test": test, "interval": "1s", "retries": 1}
    return json.dumps({"services": {"app": app}}, indent=2) + "\n"  # JSON is YAML


def use_own_branch(world: LabWorld, git_origin: GitOrigin, image: str, **compose: Any) -> str:
    """Commit ``compose_yaml(image, **compose)`` to a new branch and point the playground at it."""
    branch = f"test-{uuid.uuid4().hex[:10]}"
    git_origin.commit(branch, {"compose.yaml": compose_yaml(image, **compose)}, "Test branch")
    set_playground(world, branch=branch)
    return branch


def set_playground(world: LabWorld, **fields: Any) -> None:
    world.data["playgrounds"][0].update(fields)


def checkout_of(world: LabWorld, playground: str = PLAYGROUND_NAME) -> Path:
    return Path(checkout_dir(world.marquee(), playground))


def override_of(world: LabWorld, playground: str = PLAYGROUND_NAME) -> Path:
    return Path(override_path(world.marquee(), playground))


def checkout_head(git_origin: GitOrigin, world: LabWorld) -> str:
    return git_origin.git("-C", str(checkout_of(world)), "rev-parse", "HEAD").strip()


async def project_containers(
    docker: aiodocker.Docker, playground: str = PLAYGROUND_NAME
) -> list[dict[str, Any]]:
    """The playground's compose containers, inspected, running or not."""
    filters = json.dumps(
        {"label": [f"{PLAYGROUND}={playground}", f"{PROJECT_LABEL}=pg-{playground}"]}
    )
    listed = await docker.containers.list(all=True, filters=filters)
    return [await container.show() for container in listed]


def found(run: PhaseRun) -> dict[str, Any]:
    """The reconcile phase's finding for the lab's Playground."""
    playground: dict[str, Any] = run.report.findings["playgrounds"][PLAYGROUND_NAME]
    return playground


def notices(run: PhaseRun, kind: NoticeKind) -> list[str]:
    """The details of a phase run's notices of ``kind``."""
    return [notice.detail for notice in run.report.notices if notice.kind is kind]


async def running(docker: aiodocker.Docker) -> dict[str, Any]:
    """The lab Playground's one container."""
    [container] = await project_containers(docker)
    return container
