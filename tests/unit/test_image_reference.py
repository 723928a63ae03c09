"""``kits.image_reference``: references spelt the one way Docker reads them, so that every place
the package compares image references (image drift, the images behind a Playspec's tags, a
dry run's pulls, the web view's diff) takes two spellings of one image as one; what is no
reference compares unequal to everything and never raises."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from playguard_async.kits.image_reference import normalized, registry_of, same_image

HEX = "0123456789abcdef" * 4
DIGEST = f"sha256:{HEX}"

# reference -> how Docker reads it
NORMALIZED: dict[str, str] = {
    "busybox": "docker.io/library/busybox:latest",
    "busybox:1": "docker.io/library/busybox:1",
    "library/busybox": "docker.io/library/busybox:latest",
    "docker.io/busybox": "docker.io/library/busybox:latest",
    "docker.io/library/busybox:latest": "docker.io/library/busybox:latest",
    "index.docker.io/library/busybox:1": "docker.io/library/busybox:1",
    "registry-1.docker.io/busybox:1": "docker.io/library/busybox:1",
    "Docker.IO/busybox": "docker.io/library/busybox:latest",
    "team/app": "docker.io/team/app:latest",
    "team/sub/app:v1.2": "docker.io/team/sub/app:v1.2",
    "localhost/app": "localhost/app:latest",
    "localhost:5000/app": "localhost:5000/app:latest",
    "127.0.0.1:5000/app": "127.0.0.1:5000/app:latest",
    "127.0.0.1:5000/app:5000": "127.0.0.1:5000/app:5000",
    "registry.example/team/app:tag": "registry.example/team/app:tag",
    "Registry.Example:5000/team/app": "registry.example:5000/team/app:latest",
    "Team/app": "Team/app:latest",
    "[::1]:5000/app:v1": "[::1]:5000/app:v1",
    "a__b/c-d/e--f.g_h": "docker.io/a__b/c-d/e--f.g_h:latest",
    f"busybox@{DIGEST}": f"docker.io/library/busybox@{DIGEST}",
    f"busybox:1@{DIGEST}": f"docker.io/library/busybox@{DIGEST}",
    f"reg.example:5000/app:1@{DIGEST}": f"reg.example:5000/app@{DIGEST}",
    DIGEST: DIGEST,
    HEX: DIGEST,
}

NOT_REFERENCES = [
    "",
    " ",
    "busybox ",
    " busybox",
    "busy box",
    "busybox\n",
    "busybox\x00",
    "\x1b[31mbusybox",
    ":::",
    ":",
    "busybox:",
    "busybox@",
    "/busybox",
    "busybox/",
    "team//app",
    "Busybox",
    "team/App",
    "registry.example/Team/app",
    "-app",
    "app-",
    "app:-tag",
    "app:" + "t" * 129,
    "app@sha256:short",
    "app@sha256",
    "registry.example:port/app",
    "a" * 10_000,
    "registry.example/" + "a" * 250,
    "büsybox",
    "busybox:1:2",
]


@pytest.mark.parametrize(("reference", "expected"), sorted(NORMALIZED.items()))
def test_normalized_reads_as_docker(reference: str, expected: str) -> None:
    assert normalized(reference) == expected
    assert normalized(expected) == expected
    assert same_image(reference, expected)


@pytest.mark.parametrize("garbage", NOT_REFERENCES)
def test_garbage_is_no_reference_and_equals_nothing(garbage: str) -> None:
    assert normalized(garbage) is None
    assert not same_image(garbage, garbage)
    assert not same_image(garbage, "busybox")
    assert not same_image("busybox", garbage)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("busybox:1", "busybox:2"),
        ("busybox", "team/busybox"),
        ("registry.example/app", "docker.io/app"),
        ("localhost:5000/app", "localhost:5001/app"),
        ("Team/app", "team/app"),
        (f"app@{DIGEST}", "app:latest"),
        (f"app@{DIGEST}", f"other@{DIGEST}"),
    ],
)
def test_other_images_compare_unequal(one: str, other: str) -> None:
    assert not same_image(one, other)


@pytest.mark.parametrize(
    ("reference", "registry"),
    [
        ("busybox", None),
        ("library/busybox", None),
        ("team/app:1", None),
        ("docker.io/busybox", "docker.io"),
        ("localhost/app", "localhost"),
        ("127.0.0.1:5000/app", "127.0.0.1:5000"),
        ("Registry.Example/app", "Registry.Example"),
        ("", None),
    ],
)
def test_registry_of_is_the_host_as_written(reference: str, registry: str | None) -> None:
    assert registry_of(reference) == registry


_COMPONENT = st.from_regex(r"[a-z0-9]{1,6}(?:(?:[._]|__|-{1,2})[a-z0-9]{1,4}){0,2}", fullmatch=True)
_HOST = st.sampled_from(
    ["registry.example", "Registry.Example", "localhost", "127.0.0.1", "[::1]", "reg-1.example"]
)
_PORT = st.sampled_from(["", ":5000", ":443"])
_TAG = st.from_regex(r"\w[\w.-]{0,20}", fullmatch=True).filter(str.isascii)
_DIGEST = st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True)


@st.composite
def spellings(draw: st.DrawFn) -> tuple[str, str]:
    """One image spelt two ways Docker takes as the same: with or without the registry Docker
    Hub implies (under any of its names), ``library/``, ``:latest``, a tag beside a digest, the
    registry host's case."""
    path = draw(st.lists(_COMPONENT, min_size=1, max_size=3))
    digest = draw(st.none() | _DIGEST)
    tag = draw(st.none() | _TAG)
    if draw(st.booleans()):
        host = draw(_HOST) + draw(_PORT)
        one, other = f"{host}/", f"{host.lower() if '.' in host or ':' in host else host}/"
        names = (one + "/".join(path), other + "/".join(path))
    else:
        hub = draw(st.sampled_from(["", "docker.io/", "index.docker.io/", "registry-1.docker.io/"]))
        library = "library/" if len(path) == 1 else ""
        if len(path) > 1 and ("." in path[0] or path[0] == "localhost"):
            hub = hub or "docker.io/"  # else the first component names a registry
        names = (hub + "/".join(path), f"docker.io/{library}" + "/".join(path))
    if digest is not None:
        return f"{names[0]}@{digest}", f"{names[1]}{':' + tag if tag else ''}@{digest}"
    if tag in (None, "latest"):
        return names[0], f"{names[1]}:latest"
    return f"{names[0]}:{tag}", f"{names[1]}:{tag}"


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(pair=spellings())
@example(pair=("busybox", "registry-1.docker.io/library/busybox:latest"))
@example(pair=(f"Reg.Example:5000/app:1@{DIGEST}", f"reg.example:5000/app@{DIGEST}"))
def test_equivalent_spellings_are_one_image(pair: tuple[str, str]) -> None:
    one, other = pair
    assert same_image(one, other), pair
    assert normalized(one) == normalized(other)


@settings(max_examples=500, derandomize=True, database=None, deadline=None)
@given(text=st.text(max_size=80) | spellings().map(lambda pair: pair[0]))
@example(text="a" * 10_000)
@example(text=":::")
def test_normalizing_twice_is_normalizing_once_and_never_raises(text: str) -> None:
    once = normalized(text)
    if once is not None:
        assert normalized(once) == once
        assert same_image(text, once)
