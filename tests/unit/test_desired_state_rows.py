"""Validating a snapshot's rows: the memo of the last snapshot skips unchanged rows but never
lets a changed one through unvalidated."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from playguard_async.desired_state.postgres.relations import Rows
from playguard_async.desired_state.postgres.validation import RowMemo, validate_snapshot
from tests.support.pg_inventory import marquee_rows


def _rows() -> Rows:
    return {
        "marquees": marquee_rows("edge-0", "edge-1"),
        "registries": [],
        "playspecs": [
            {
                "name": "shop",
                "repo": "https://g.example/s.git",
                "compose_file": "c.yaml",
                "images": ["shop:1"],
                "registry": None,
            },
        ],
        "playgrounds": [
            {
                "name": f"pg-{index}",
                "playspec": "shop",
                "marquee": f"edge-{index}",
                "branch": "main",
                "state": "running",
                "expires_at": None,
                "stop_when_branch_gone": False,
            }
            for index in range(2)
        ],
        "agent_chats": [],
    }


def test_an_unchanged_snapshot_returns_the_last_result_itself() -> None:
    memo = RowMemo()
    first = validate_snapshot(_rows(), memo)
    assert validate_snapshot(_rows(), memo) is first


def test_a_changed_row_is_validated_again_and_the_others_are_reused() -> None:
    memo = RowMemo()
    first = validate_snapshot(_rows(), memo).inventory
    changed = _rows()
    changed["playgrounds"][1]["branch"] = "feature/x"

    second = validate_snapshot(changed, memo).inventory

    assert second.playgrounds_on("edge-1")[0].branch == "feature/x"
    assert second.marquees[0] is first.marquees[0]
    assert second.playgrounds[0] is first.playgrounds[0]


def test_a_row_turned_bad_is_refused_though_its_old_self_was_valid() -> None:
    memo = RowMemo()
    validate_snapshot(_rows(), memo)
    bad = copy.deepcopy(_rows())
    bad["playgrounds"][0]["branch"] = "$(reboot)"

    validated = validate_snapshot(bad, memo)

    assert [m.name for m in validated.inventory.marquees] == ["edge-1"]
    assert validated.problems[0].startswith("playgrounds 'pg-0': column branch: ")
    assert validated.problems[1] == (
        "marquees 'edge-0': left out of this snapshot (a row it needs is bad)"
    )


def _repeat_marquee(rows: Rows) -> None:
    rows["marquees"].append(dict(rows["marquees"][0]))


def _repeat_playground(rows: Rows) -> None:
    rows["playgrounds"].append({**rows["playgrounds"][1], "branch": "other"})


def _unknown_playspec(rows: Rows) -> None:
    rows["playgrounds"][0]["playspec"] = "gone"


def _unknown_marquee(rows: Rows) -> None:
    rows["playgrounds"][1]["marquee"] = "edge-9"


def _unknown_registry(rows: Rows) -> None:
    rows["playspecs"][0]["registry"] = "gone"


def _null_name(rows: Rows) -> None:
    rows["playgrounds"][1]["name"] = None


# (how a view's rows go wrong, the Marquees kept, the first problem line)
VIEW_ROWS = [
    (_repeat_marquee, ["edge-1"],
     "marquees 'edge-0': 2 rows have this name (a join in the view repeats it?); all of them "
     "left out"),
    (_repeat_playground, ["edge-0"],
     "playgrounds 'pg-1': 2 rows have this name (a join in the view repeats it?); all of them "
     "left out"),
    (_unknown_playspec, ["edge-1"],
     "playgrounds 'pg-0': column playspec: no row of playspecs has the name 'gone'; left out"),
    (_unknown_marquee, ["edge-0", "edge-1"],
     "playgrounds 'pg-1': column marquee: no row of marquees has the name 'edge-9'; left out"),
    (_unknown_registry, [],
     "playspecs 'shop': column registry: no row of registries has the name 'gone'; left out"),
    (_null_name, ["edge-0"], "playgrounds None: column name: "),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spoil", "kept", "first"), VIEW_ROWS, ids=lambda v: getattr(v, "__name__", "")
)
def test_what_only_a_view_can_give_takes_out_only_its_marquees(
    spoil: Callable[[Rows], None], kept: list[str], first: str
) -> None:
    rows = _rows()
    spoil(rows)
    validated = validate_snapshot(rows)
    assert [m.name for m in validated.inventory.marquees] == kept
    assert validated.problems[0].startswith(first)
    assert all("\n" not in line for line in validated.problems)


def test_a_broken_relation_refuses_its_rows_and_says_why_once() -> None:
    rows = _rows()
    rows["playgrounds"] = [{"name": "pg-0", "playspec": "shop", "marquee": "edge-0"}]  # keys
    memo = RowMemo()
    broken = {"playgrounds": ["playguard.playgrounds: column branch missing"]}

    validated = validate_snapshot(rows, memo, broken)
    again = validate_snapshot(rows, memo, {"playgrounds": ["playguard.playgrounds: other"]})

    assert [m.name for m in validated.inventory.marquees] == ["edge-1"]
    assert validated.problems == [
        "playguard.playgrounds: column branch missing",
        "marquees 'edge-0': left out of this snapshot (a row it needs is bad)",
    ]
    assert again.problems[0] == "playguard.playgrounds: other", "a new reason is not memoised"
