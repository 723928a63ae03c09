"""A release's name is a digest of what reaches the host: the same whatever the model says besides
(a field a newer version adds at its default, the rollout policy, health and rollback settings,
the registry's credentials, the order of images and of keys), another whenever the commit, an
image's digest, the compose file or a byte of the override playguard writes is another."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.desired_state.model import Playspec
from playguard_async.phases import release_identity
from playguard_async.phases.release_identity import release_digest
from playguard_async.remote.compose import override_content

COMMIT = "c" * 40
DIGESTS = {
    "registry.example/web:1": "sha256:" + "a" * 64,
    "registry.example/db:2": "sha256:" + "b" * 64,
    "docker.io/library/redis:7": "sha256:" + "d" * 64,
}
BASE: dict[str, Any] = {
    "name": "web",
    "repo": "https://git.example/web.git",
    "compose_file": "deploy/compose.yaml",
    "images": list(DIGESTS),
}


class NewerPlayspec(Playspec):
    """The Playspec as a newer version of playguard would model it: a field more, at its
    default, which a dump of the model would show."""

    notes: str = ""
    retries: int = 3


def release(playspec: Playspec, commit: str = COMMIT, digests: dict[str, str] = DIGESTS) -> str:
    return release_digest(playspec, commit, digests)


SAME = release(Playspec.model_validate(BASE))

policies = st.none() | st.builds(
    lambda waves, bake, failures: {"waves": waves, "bake": bake, "max_failures": failures},
    st.sampled_from([[1, "100%"], [1, "10%", "100%"], [2, "50%"]]),
    st.integers(0, 3600),
    st.integers(0, 5),
)


@given(
    model=st.sampled_from([Playspec, NewerPlayspec]),
    images=st.permutations(list(DIGESTS)).flatmap(
        lambda order: st.lists(st.sampled_from(order), min_size=0, max_size=3).map(
            lambda extra: order + extra
        )
    ),
    rollout=policies,
    rollback=st.sampled_from(["off", "notify", "auto"]),
    health_timeout=st.floats(1, 600),
    name=st.sampled_from(["web", "web-2"]),
    registry=st.sampled_from([None, "hub"]),
    key_order=st.permutations(list(DIGESTS)),
)
def test_a_release_is_named_alike_whatever_the_model_says_that_reaches_no_host(
    model: type[Playspec],
    images: list[str],
    rollout: dict[str, Any] | None,
    rollback: str,
    health_timeout: float,
    name: str,
    registry: str | None,
    key_order: list[str],
) -> None:
    fields = {
        **BASE, "name": name, "images": images, "rollout": rollout, "rollback": rollback,
        "health_timeout": health_timeout, "registry": registry,
    }  # fmt: skip
    playspec = model.model_validate(dict(reversed(fields.items())))
    assert release(playspec, digests={ref: DIGESTS[ref] for ref in key_order}) == SAME


NEW_IMAGE = "registry.example/new:1"


@pytest.mark.parametrize(
    ("playspec", "commit", "digests"),
    [
        pytest.param(BASE, "e" * 40, DIGESTS, id="commit"),
        *(
            pytest.param(BASE, COMMIT, {**DIGESTS, ref: "sha256:" + "f" * 64}, id=f"digest {ref}")
            for ref in DIGESTS
        ),
        pytest.param({**BASE, "compose_file": "compose.yaml"}, COMMIT, DIGESTS, id="compose file"),
        pytest.param(
            {**BASE, "images": [*DIGESTS, NEW_IMAGE]},
            COMMIT,
            {**DIGESTS, NEW_IMAGE: "sha256:" + "e" * 64},
            id="an image more",
        ),
        pytest.param({**BASE, "images": list(DIGESTS)[1:]}, COMMIT, DIGESTS, id="an image fewer"),
    ],
)
def test_a_release_is_named_anew_when_what_reaches_the_host_changes(
    playspec: dict[str, Any], commit: str, digests: dict[str, str]
) -> None:
    renamed = release(Playspec.model_validate(playspec), commit, digests)
    assert renamed != SAME
    assert len(renamed) == 64


def test_a_release_is_named_anew_when_a_byte_of_the_override_playguard_writes_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A version of playguard that writes another override names another release (its waves
    then take the change to the hosts), through the writer's own function."""

    def another(*args: Any, **kwargs: Any) -> str:
        return override_content(*args, **kwargs) + "\n"

    monkeypatch.setattr("playguard_async.phases.release_identity.override_content", another)
    assert release(Playspec.model_validate(BASE)) != SAME


def test_the_format_tag_is_part_of_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new tag for what a release is made of names every release anew, on purpose."""
    monkeypatch.setattr(release_identity, "RELEASE_FORMAT", "release-v2")
    assert release(Playspec.model_validate(BASE)) != SAME
