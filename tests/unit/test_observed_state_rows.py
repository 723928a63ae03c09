"""A cycle record's reconciled Playgrounds as ``playground_status`` rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from playguard_async.desired_state.postgres.observed_state import playground_rows

REVISION = {
    "commit": "a" * 40,
    "images": {"app": "registry.example/app@sha256:" + "b" * 64},
    "env": "c" * 64,
    "override": "-",
}


def test_each_reconciled_playground_becomes_a_row_with_its_last_action_and_revisions() -> None:
    """A revision not of its shape (a commit that is an option) is written as null."""
    record = {
        "marquee": "edge-0",
        "cycle": "c1",
        "finished_at": 1_800_000_000.5,
        "findings": {
            "sync_git": {"heads": {"pg-1": "abc"}},
            "reconcile_playgrounds": {
                "playgrounds": {
                    "pg-1": {"state": "running", "drift": ["image differs"],
                             "actions": ["pull", "compose up -d; rm -rf /"]},
                    "pg-2": {"state": "stopped", "drift": [], "actions": []},
                    "pg-3": {"state": "running", "drift": [], "actions": [], "revision": REVISION,
                             "last_good_revision": {**REVISION, "commit": "--upload-pack=x"},
                             "pinned": "pinned at last-good by ann@desk: demo"},
                }
            },
        },
    }  # fmt: skip
    finished = datetime.fromtimestamp(1_800_000_000.5, UTC)

    assert playground_rows(record) == [
        ("pg-1", "edge-0", "running", json.dumps(["image differs"]), "compose up -d; rm -rf /",
         "c1", finished, None, None, None),
        ("pg-2", "edge-0", "stopped", "[]", None, "c1", finished, None, None, None),
        ("pg-3", "edge-0", "running", "[]", None, "c1", finished, json.dumps(REVISION), None,
         "pinned at last-good by ann@desk: demo"),
    ]  # fmt: skip


def test_a_record_without_playground_findings_has_no_rows() -> None:
    record = {"marquee": "m", "cycle": "c", "finished_at": 0.0, "findings": {"x": {"y": 1}}}
    assert playground_rows(record) == []
