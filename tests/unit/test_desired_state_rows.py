"""Validating a snapshot's rows: the memo of the last snapshot skips unchanged rows but never
lets a changed one through unvalidated."""

from __future__ import annotations

import copy
from typing import Any

from playguard_async.desired_state.postgres import RowMemo, Rows, validate_snapshot


def _rows() -> Rows:
    marquee: dict[str, Any] = {
        "name": "edge-0", "host": "127.0.0.1", "port": 22, "user": "u",
        "identity_file": "/k/id", "known_hosts": "/k/kh", "docker_socket": "/run/d.sock",
        "workdir": "/srv/p", "state_dir": None, "launchable": True, "mode": "apply",
        "windows": None,
    }  # fmt: skip
    return {
        "marquees": [marquee, {**marquee, "name": "edge-1"}],
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
