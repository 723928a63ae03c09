"""What a replica lists of the Marquees outside its share: the listing's rows as a view may give
them (garbage included) split by the share, with the rollout cohorts of each, and
``Inventory.listed`` and ``Inventory.cohort`` merging both sides."""

from __future__ import annotations

from typing import Literal

import pytest

from playguard_async.desired_state.model import (
    CohortMember,
    Inventory,
    Marquee,
    MarqueeListing,
    Playground,
    Playspec,
)
from playguard_async.desired_state.postgres.shares import _cohorts_by_marquee, _split
from tests.support.engine import inventory_of

GARBAGE_ROWS = [
    (None, True, "apply", False),
    (42, True, "apply", False),
    (b"edge", True, "apply", False),
    ("edge-x", None, "apply", False),
    ("edge-x", "true", "apply", False),
    ("edge-x", 1, "apply", False),
    ("edge-x", True, None, False),
    ("edge-x", True, "APPLY", False),
    ("edge-x", True, "apply; DROP TABLE marquees", False),
    ("edge-x", True, "", False),
    ("edge-x", True, "apply", None),
    ("edge-x", True, "apply", "t"),
    ("edge-x", True, "apply", 1),
]


@pytest.mark.parametrize("row", GARBAGE_ROWS)
@pytest.mark.parametrize("mine", [True, False])
def test_a_listing_row_that_is_not_a_name_a_boolean_a_mode_and_a_boolean_is_in_neither_side(
    row: tuple[object, object, object, object], mine: bool
) -> None:
    asked: list[str] = []

    def share(name: str) -> bool:
        asked.append(name)
        return mine

    names, elsewhere = _split([("edge-1", False, "detect", True), row], {}, share)

    assert asked == ["edge-1"]
    assert (names, elsewhere) == (
        (["edge-1"], ()) if mine else ([], (MarqueeListing("edge-1", False, "detect", True),))
    )


SCOPES = (("shop", "main"), ("shop", "next"))


@pytest.mark.parametrize(
    ("launchable", "mode", "cohorts"),
    [(True, "apply", SCOPES), (False, "apply", ()), (True, "detect", ()), (True, "off", ())],
)
def test_a_marquee_elsewhere_is_in_the_cohorts_of_its_running_playgrounds_when_it_applies(
    launchable: bool, mode: str, cohorts: tuple[tuple[str, str], ...]
) -> None:
    names, elsewhere = _split(
        [("edge-1", launchable, mode, False)], {"edge-1": SCOPES}, lambda name: False
    )
    assert names == []
    assert elsewhere == (MarqueeListing("edge-1", launchable, mode, False, cohorts),)  # type: ignore[arg-type]


COHORT_GARBAGE = [
    (None, ["shop"], ["main"]),
    (7, ["shop"], ["main"]),
    ("edge-1", None, None),
    ("edge-1", ["shop", None], ["main", "next"]),
    ("edge-1", ["shop"], [b"main"]),
    ("edge-1", "shop", "main"),
    ("edge-1", [1], ["main"]),
]


@pytest.mark.parametrize("row", COHORT_GARBAGE)
def test_a_cohort_row_with_anything_but_text_gives_its_marquee_no_cohort(
    row: tuple[object, object, object],
) -> None:
    good = ("edge-2", ["shop", "shop"], ["next", "main"])
    assert _cohorts_by_marquee([good, row]) == {"edge-2": SCOPES}


def test_marquees_with_equal_cohorts_share_one_tuple() -> None:
    rows = [(f"edge-{n}", ["shop", "shop"], ["main", "next"]) for n in range(3)]
    found = _cohorts_by_marquee(rows)
    assert {id(scopes) for scopes in found.values()} == {id(found["edge-0"])}


def test_listed_merges_the_held_marquees_and_the_others_in_name_order() -> None:
    held = inventory_of("edge-2", "edge-4")
    assert held.listed() == [
        MarqueeListing("edge-2", True, "apply"),
        MarqueeListing("edge-4", True, "apply"),
    ]
    held._elsewhere = (
        MarqueeListing("edge-1", True, "off"),
        MarqueeListing("edge-3", False, "apply"),
    )
    assert [m.name for m in held.listed()] == ["edge-1", "edge-2", "edge-3", "edge-4"]
    assert Inventory().listed() == []


def _fleet(
    *marquees: Marquee, playgrounds: list[tuple[str, str, str, Literal["running", "stopped"]]]
) -> Inventory:
    """An inventory of ``marquees`` and Playgrounds (name, marquee, branch, state) of ``shop``."""
    return Inventory(
        marquees=list(marquees),
        playspecs=[Playspec(name="shop", repo="https://git.example.com/shop.git")],
        playgrounds=[
            Playground(name=name, playspec="shop", marquee=marquee, branch=branch, state=state)
            for name, marquee, branch, state in playgrounds
        ],
    )


def _marquee(name: str, **fields: object) -> Marquee:
    [marquee] = inventory_of(name).marquees
    return marquee.model_copy(update=fields)


def test_a_held_marquee_is_listed_as_another_replica_lists_it() -> None:
    inventory = _fleet(
        _marquee("edge-1", canary=True),
        _marquee("edge-2", mode="detect"),
        _marquee("edge-3", launchable=False),
        _marquee("edge-4"),
        playgrounds=[("a", "edge-1", "next", "running"), ("b", "edge-1", "main", "running"),
                     ("c", "edge-1", "main", "running"), ("d", "edge-1", "old", "stopped"),
                     ("e", "edge-2", "main", "running"), ("f", "edge-3", "main", "running")],
    )  # fmt: skip
    assert inventory.listed() == [
        MarqueeListing("edge-1", True, "apply", True, SCOPES),
        MarqueeListing("edge-2", True, "detect", False, ()),
        MarqueeListing("edge-3", False, "apply", False, ()),
        MarqueeListing("edge-4", True, "apply", False, ()),
    ]
    assert list(inventory.cohort("shop", "main")) == [CohortMember("edge-1", True)]
    assert list(inventory.cohort("shop", "old")) == []


def test_a_cohort_counts_the_marquees_listed_elsewhere_set_after_the_index_was_built() -> None:
    held = _fleet(_marquee("edge-2"), playgrounds=[("a", "edge-2", "main", "running")])
    assert list(held.cohort("shop", "main")) == [
        CohortMember("edge-2", False)
    ]  # the index is built
    held._elsewhere = (
        MarqueeListing("edge-1", True, "apply", True, (("shop", "main"),)),
        MarqueeListing("edge-3", True, "apply", False, SCOPES),
    )
    assert list(held.cohort("shop", "main")) == [
        CohortMember("edge-1", True), CohortMember("edge-2", False), CohortMember("edge-3", False)
    ]  # fmt: skip
    assert list(held.cohort("shop", "next")) == [CohortMember("edge-3", False)]
    # The PostgreSQL source gives an unchanged share's inventory the listing of its next read.
    held._elsewhere = (MarqueeListing("edge-3", True, "apply", False, (("shop", "next"),)),)
    assert list(held.cohort("shop", "main")) == [CohortMember("edge-2", False)]
    assert list(held.cohort("shop", "next")) == [CohortMember("edge-3", False)]


def test_a_pair_two_playgrounds_share_is_one_scope() -> None:
    rows = [("edge-1", ["shop", "shop", "shop"], ["next", "main", "next"])]
    assert _cohorts_by_marquee(rows) == {"edge-1": SCOPES}
