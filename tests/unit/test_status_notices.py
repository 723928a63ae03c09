"""``playguard status`` reads what a cycle asks an operator to look at from the record's notices,
whichever phases wrote them, a deployment's own included; a notice of another shape makes the
record one playguard did not write."""

from __future__ import annotations

from typing import Any

import pytest

from playguard_async.coordination.marquee_reads import LastCycle
from playguard_async.cycle_record import NoticeKind
from playguard_async.engine.results import CycleResult
from playguard_async.phases.protocol import Notice


def record_with(notices: dict[str, Any]) -> dict[str, Any]:
    return {**CycleResult(marquee="m1", cycle_id="c1").to_record(), "notices": notices}


def test_notices_of_any_phase_become_drift_branches_gone_and_failures() -> None:
    reports = {
        "reconcile_playgrounds": [
            Notice(NoticeKind.DRIFT, "web", "app: missing"),
            Notice(NoticeKind.DRIFT, "web", "override changed"),
        ],
        "sync_git": [Notice(NoticeKind.BRANCH_GONE, "api", "feature/x")],
        "fetch_branches": [Notice(NoticeKind.BRANCH_GONE, "api", "feature/x")],
        "site.phases:audit": [Notice(NoticeKind.FAILED, "vault", "no answer")],
    }
    notices = {phase: [notice.to_json() for notice in found] for phase, found in reports.items()}
    last = LastCycle.from_record(record_with(notices))
    assert last.outcome == "ok"
    assert last.drift == {"web": ["app: missing", "override changed"]}
    assert last.branch_gone == {"api": "feature/x"}
    assert last.failed == ["site.phases:audit: vault"]


def test_a_record_without_notices_asks_for_nothing() -> None:
    last = LastCycle.from_record(record_with({}))
    assert (last.outcome, last.drift, last.branch_gone, last.failed) == ("ok", {}, {}, [])


@pytest.mark.parametrize(
    "notices",
    [
        {"p": [{"kind": "unheard_of", "subject": "s", "detail": "d"}]},
        {"p": [{"kind": "drift", "subject": 1, "detail": "d"}]},
        {"p": [{"kind": "failed", "subject": "s"}]},
        {"p": ["drift"]},
        {"p": 3},
        [1, 2],
        "notices",
    ],
)
def test_notices_of_another_shape_read_as_a_foreign_record(notices: Any) -> None:
    assert LastCycle.from_record(record_with(notices)).outcome == "unknown"
