"""The decision a rollback makes before it writes: which parts of its revision it cannot have
(``remote.rollback_check.missing_parts``), and what it is told once per (``fingerprint``)."""

from __future__ import annotations

import pytest

from playguard_async.cycle_record import ABSENT_FILE
from playguard_async.remote.revision import Revision
from playguard_async.remote.rollback_check import HostFacts, fingerprint, missing_parts

COMMIT = "3f2a9c01d4e5" + "0" * 28
ENV = "5d41402abc4b" + "1" * 52
OTHER_ENV = "9e107d9d372b" + "2" * 52
IMAGE = "127.0.0.1:5000/shop@sha256:" + "a" * 64
REVISION = Revision(COMMIT, {"app": IMAGE, "db": "127.0.0.1:5000/db@sha256:" + "b" * 64}, ENV)
COPY = "~/.local/state/playguard/edge-1/playgrounds/web-main.env"
GONE = "is neither on the host nor served by its registry (engine answered 404)"

CASES: list[tuple[str, HostFacts, list[str]]] = [
    ("all there", HostFacts("host", ENV, {"app": None, "db": None}), []),
    ("commit fetched from origin", HostFacts("origin", ENV, {"app": None}), []),
    ("nothing asked", HostFacts(), []),
    (
        "commit gone",
        HostFacts("none", ENV, {"app": None}),
        ["commit 3f2a9c01d4e5 is neither in the checkout nor served by its origin"],
    ),
    (
        "image gone",
        HostFacts("host", ENV, {"app": GONE, "db": None}),
        [f"image app={IMAGE} {GONE}"],
    ),
    (
        "env copy missing",
        HostFacts("host", ABSENT_FILE, {}),
        [f".env copy {COPY} is missing (env=5d41402abc4b)"],
    ),
    (
        "env copy changed",
        HostFacts(None, OTHER_ENV, None),
        [f".env copy {COPY} has env=9e107d9d372b, not the recorded env=5d41402abc4b"],
    ),
    (
        "all gone",
        HostFacts("none", ABSENT_FILE, {"db": GONE, "app": GONE}),
        [
            "commit 3f2a9c01d4e5 is neither in the checkout nor served by its origin",
            f"image app={IMAGE} {GONE}",
            f"image db={REVISION.images['db']} {GONE}",
            f".env copy {COPY} is missing (env=5d41402abc4b)",
        ],
    ),
]


@pytest.mark.parametrize(("facts", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_missing_part_is_named_by_digest_and_path(
    facts: HostFacts, expected: list[str]
) -> None:
    assert list(missing_parts(REVISION, facts, COPY)) == expected


def test_a_revision_without_a_commit_needs_none() -> None:
    assert missing_parts(Revision(None, {}, ENV), HostFacts("none"), COPY) == ()


@pytest.mark.parametrize(
    "other",
    [
        ("web-other", REVISION, ("x",)),
        ("web-main", Revision(COMMIT, {"app": IMAGE}, OTHER_ENV), ("x",)),
        ("web-main", REVISION, ("y",)),
        ("web-main", REVISION, ("x", "y")),
    ],
    ids=["playground", "revision", "missing", "more missing"],
)
def test_told_once_per_playground_revision_and_missing_parts(
    other: tuple[str, Revision, tuple[str, ...]],
) -> None:
    told = fingerprint("web-main", REVISION, ("x",))
    assert fingerprint("web-main", REVISION, ("x",)) == told
    assert fingerprint(*other) != told


def test_the_order_of_the_missing_parts_is_not_news() -> None:
    assert fingerprint("p", REVISION, ("a", "b")) == fingerprint("p", REVISION, ("b", "a"))
