"""A cycle record's reconciled Playgrounds as ``playground_status`` rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from playguard_async.desired_state.postgres.observed_state import playground_rows


def test_each_reconciled_playground_becomes_a_row_with_its_last_action() -> None:
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
                }
            },
        },
    }  # fmt: skip
    finished = datetime.fromtimestamp(1_800_000_000.5, UTC)

    assert playground_rows(record) == [
        ("pg-1", "edge-0", "running", json.dumps(["image differs"]), "compose up -d; rm -rf /",
         "c1", finished),
        ("pg-2", "edge-0", "stopped", "[]", None, "c1", finished),
    ]  # fmt: skip


def test_a_record_without_playground_findings_has_no_rows() -> None:
    record = {"marquee": "m", "cycle": "c", "finished_at": 0.0, "findings": {"x": {"y": 1}}}
    assert playground_rows(record) == []
