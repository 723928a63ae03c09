"""What a replica lists of the Marquees outside its share: the listing's rows as a view may give
them (garbage included) split by the share, and ``Inventory.listed`` merging both sides."""

from __future__ import annotations

import pytest

from playguard_async.desired_state.model import Inventory, MarqueeListing
from playguard_async.desired_state.postgres.source import _split
from tests.support.engine import inventory_of

GARBAGE_ROWS = [
    (None, True, "apply"),
    (42, True, "apply"),
    (b"edge", True, "apply"),
    ("edge-x", None, "apply"),
    ("edge-x", "true", "apply"),
    ("edge-x", 1, "apply"),
    ("edge-x", True, None),
    ("edge-x", True, "APPLY"),
    ("edge-x", True, "apply; DROP TABLE marquees"),
    ("edge-x", True, ""),
]


@pytest.mark.parametrize("row", GARBAGE_ROWS)
@pytest.mark.parametrize("mine", [True, False])
def test_a_listing_row_that_is_not_a_name_a_boolean_and_a_mode_is_in_neither_side(
    row: tuple[object, object, object], mine: bool
) -> None:
    asked: list[str] = []

    def share(name: str) -> bool:
        asked.append(name)
        return mine

    names, elsewhere = _split([("edge-1", False, "detect"), row], share)

    assert asked == ["edge-1"]
    assert (names, elsewhere) == (
        (["edge-1"], ()) if mine else ([], (MarqueeListing("edge-1", False, "detect"),))
    )


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
