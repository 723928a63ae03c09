"""A new image behind a tag is drift whatever compose's version: the pure judgement of
``image_drift`` over containers as the Engine API lists them (garbage included), the references
``references_of`` reads for it, a dry run's pulls as the plan reads them, and the cause such a
change is told by (a release)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from playguard_async.kits.vocabulary import Cause
from playguard_async.phases.causes import change_cause
from playguard_async.phases.container_drift import image_drift, references_of
from playguard_async.remote.compose import SERVICE_LABEL
from playguard_async.remote.errors import DockerApiError
from playguard_async.remote.host_state import ABSENT
from playguard_async.remote.last_good import LastGood
from playguard_async.remote.planned import planned_image_ids
from playguard_async.remote.registry import pull
from playguard_async.remote.revision import Revision

OLD, NEW = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def _container(service: str = "app", **fields: Any) -> dict[str, Any]:
    listed: dict[str, Any] = {
        "Id": f"{service}-id",
        "Names": [f"/web-{service}-1"],
        "Labels": {SERVICE_LABEL: service},
        "ImageID": OLD,
    }
    listed.update(fields)
    return listed


# name -> (containers, images behind references now, container ID -> reference, drift)
CASES: dict[str, tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any], list[str]]] = {
    "same image behind the tag": ([_container()], {"reg/app:1": OLD}, {"app-id": "reg/app:1"}, []),
    "a new image behind the tag": (
        [_container()], {"reg/app:1": NEW}, {"app-id": "reg/app:1"},
        ["app: web-app-1 image changed"],
    ),
    "a dry run's planned pull (a stand-in ID)": (
        [_container()], {"reg/app:1": "pulled reg/app:1"}, {"app-id": "reg/app:1"},
        ["app: web-app-1 image changed"],
    ),
    "no tag means latest, either way round": (
        [_container(), _container("db", Id="db-id")],
        {"reg/app": NEW, "reg/db:latest": NEW},
        {"app-id": "reg/app:latest", "db-id": "reg/db"},
        ["app: web-app-1 image changed", "db: web-db-1 image changed"],
    ),
    "a registry port is not a tag": (
        [_container()], {"127.0.0.1:5000/app": NEW}, {"app-id": "127.0.0.1:5000/app:latest"},
        ["app: web-app-1 image changed"],
    ),
    "Docker Hub's spellings are one image": (
        [_container(), _container("db", Id="db-id")],
        {"busybox:1": NEW, "index.docker.io/team/db": NEW},
        {"app-id": "docker.io/library/busybox:1", "db-id": "team/db:latest"},
        ["app: web-app-1 image changed", "db: web-db-1 image changed"],
    ),
    "a registry host in another case": (
        [_container()], {"Reg.Example:5000/app": NEW}, {"app-id": "reg.example:5000/app:latest"},
        ["app: web-app-1 image changed"],
    ),
    "a tag beside a digest: the digest says": (
        [_container()], {"reg.example/app@" + NEW: NEW}, {"app-id": "reg.example/app:1@" + NEW},
        ["app: web-app-1 image changed"],
    ),
    "another tag is another image": (
        [_container()], {"busybox:1": NEW}, {"app-id": "busybox:2"}, [],
    ),
    "garbage on either side is not judged": (
        [_container(), _container("db", Id="db-id")],
        {":::": NEW, "": NEW, "reg/App:1": NEW, "x" * 10_000: NEW},
        {"app-id": ":::", "db-id": "reg/App:1"}, [],
    ),
    "a built image (no reference in the Playspec)": (
        [_container()], {"reg/other:1": NEW}, {"app-id": "web-app"}, [],
    ),
    "a digest the override pins": (
        [_container()], {"reg/app:1": NEW}, {"app-id": "reg/app@sha256:" + "c" * 64}, [],
    ),
    "the reference has no image on the host": (
        [_container()], {"reg/app:1": ABSENT}, {"app-id": "reg/app:1"}, [],
    ),
    "no reference read for the container": ([_container()], {"reg/app:1": NEW}, {}, []),
    "ImageID missing": (
        [_container(ImageID=None)], {"reg/app:1": NEW},
        {"app-id": "reg/app:1"}, [],
    ),
    "ImageID absent from the listing": (
        [{k: v for k, v in _container().items() if k != "ImageID"}], {"reg/app:1": NEW},
        {"app-id": "reg/app:1"}, [],
    ),
    "ImageID of another type": (
        [_container(ImageID=42)], {"reg/app:1": NEW}, {"app-id": "reg/app:1"}, [],
    ),
    "ImageID empty": ([_container(ImageID="")], {"reg/app:1": NEW}, {"app-id": "reg/app:1"}, []),
    "a reference of another type": ([_container()], {"reg/app:1": NEW}, {"app-id": None}, []),
    "an image ID of another type": (
        [_container()], {"reg/app:1": None, "reg/db:1": 7}, {"app-id": "reg/app:1"}, [],
    ),
    "no Id, no Names: the short id is the name": (
        [_container(Id=None, Names=None)], {"reg/app:1": NEW}, {"None": "reg/app:1"},
        ["app: None image changed"],
    ),
    "only the container that moved, services in order": (
        [_container("web", Id="w", ImageID=NEW), _container("api", Id="a"),
         _container("api", Id="a2", Names=["/web-api-2"], ImageID=NEW)],
        {"reg/app:1": NEW}, {"w": "reg/app:1", "a": "reg/app:1", "a2": "reg/app:1"},
        ["api: web-api-1 image changed"],
    ),
    "no containers": ([], {"reg/app:1": NEW}, {}, []),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_image_drift(case: str) -> None:
    own, images, created_from, drift = CASES[case]
    assert image_drift(own, images, created_from) == drift


class _FakeSession:
    """What ``references_of`` uses of a session: the Engine API's inspect, counted; a
    container without a config here is gone (404)."""

    def __init__(self, configs: dict[str, Any]) -> None:
        self.configs = configs
        self.inspected: list[str] = []
        self.docker = self
        self.host = "m-0"

    async def _query_json(self, path: str, **_: Any) -> Any:
        container_id = path.removeprefix("containers/").removesuffix("/json")
        self.inspected.append(container_id)
        if container_id not in self.configs:
            raise DockerApiError(self.host, 404, f"No such container: {container_id}")
        return self.configs[container_id]

    async def api(self, call: Any) -> Any:
        return await call


def test_references_are_listed_and_only_a_moved_tag_is_inspected() -> None:
    """Docker lists the reference a container was created from, or the image's ID where that
    reference no longer names the image: only that container costs an inspect. One gone
    between the listing and its inspect is not judged."""
    own = [
        _container("web", Id="w", Image="reg/web:1"),
        _container("app", Id="a", Image=OLD),
        _container("db", Id="d", Image=None),
        _container("odd", Id="o", Image=OLD),
        _container("gone", Id="g", Image=OLD),
        _container("list", Id="l", Image=OLD),
    ]
    session = _FakeSession(
        {"a": {"Config": {"Image": "reg/app:1"}}, "d": {"Config": None}, "o": {}, "l": [1]}
    )
    references = asyncio.run(references_of(session, own))  # type: ignore[arg-type]
    assert references == {"w": "reg/web:1", "a": "reg/app:1"}
    assert session.inspected == ["a", "d", "o", "g", "l"]


def test_a_new_image_behind_a_tag_is_a_release() -> None:
    """The same files and commit with other images behind the tags: the inputs moved, so the
    ``up`` the image drift calls for is a release, not drift (the glossary's words)."""
    good = LastGood(
        inputs="before",
        compose="c",
        revision=Revision(commit="1" * 40, images={}, env="e", override="o"),
    )
    cause = change_cause(
        good, inputs="after", files={"compose": "c", "env": "e"}, commit="1" * 40, hold=None,
        drift=["app: web-app-1 image changed"],
    )  # fmt: skip
    assert cause.cause is Cause.RELEASE


class _PullingSession:
    """What ``registry.pull`` and ``planned_image_ids`` use of a dry run's session."""

    def __init__(self) -> None:
        self.dry_run = True
        self.pulled: set[str] = set()
        self.marquee = SimpleNamespace(docker_socket="/run/docker.sock")
        self.changes: list[str] = []

    async def change(self, what: str, argv: list[str], *, stdin: str) -> None:
        self.changes.append(what)


def test_an_image_is_pulled_once_a_cycle_and_planned_pulled_whatever_its_spelling() -> None:
    """Two Playspecs (or a chat) spelling one image two ways: one pull, and the plan takes the
    image behind either spelling as the pulled one, as the cycle will find it."""
    session = _PullingSession()
    asyncio.run(pull(session, "busybox:1", None))  # type: ignore[arg-type]
    asyncio.run(pull(session, "docker.io/library/busybox:1", None))  # type: ignore[arg-type]
    assert session.changes == ["pull busybox:1"]
    planned = planned_image_ids(
        session,  # type: ignore[arg-type]
        {"index.docker.io/library/busybox:1": OLD, "busybox:2": OLD, ":::": OLD},
    )
    assert planned == {
        "index.docker.io/library/busybox:1": "pulled index.docker.io/library/busybox:1",
        "busybox:2": OLD,
        ":::": OLD,
    }
