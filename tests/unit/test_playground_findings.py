"""The Playground findings of a cycle record: one shape, written by reconcile_playgrounds and read
back by the observed-state write-back and describe, with the wire format records already in Redis
have, and whatever else a stored record holds read as absent."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from playguard_async.coordination.marquee_reads import LastCycle, last_good_states
from playguard_async.coordination.records import decoded_record, encode_record
from playguard_async.cycle_record import PlaygroundFinding, playground_findings
from playguard_async.desired_state.postgres.observed_state import playground_rows
from playguard_async.engine.results import CycleResult, Outcome

GOOD = "app=registry.example/app@sha256:" + "1" * 64
WHY = "rolled back to " + GOOD + " because app: unhealthy: curl: (7) refused"

WRITTEN_BEFORE: dict[str, tuple[str, PlaygroundFinding]] = {
    "expired": (
        '{"state":"expired","drift":["expired at 2026-01-01T00:00:00+00:00"],'
        '"actions":["take down playground web (expired at 2026-01-01T00:00:00+00:00)"]}',
        PlaygroundFinding(
            "expired",
            ("expired at 2026-01-01T00:00:00+00:00",),
            ("take down playground web (expired at 2026-01-01T00:00:00+00:00)",),
        ),
    ),
    "stopped-already": (
        '{"state":"stopped","drift":[],"actions":[]}',
        PlaygroundFinding("stopped"),
    ),
    "branch-gone": (
        '{"state":"branch_gone","drift":["branch feature/x is gone"],"actions":["stop"]}',
        PlaygroundFinding("branch_gone", ("branch feature/x is gone",), ("stop",)),
    ),
    "no-checkout": (
        '{"state":"no_checkout","drift":[],"actions":[]}',
        PlaygroundFinding("no_checkout"),
    ),
    "converged": (
        f'{{"state":"running","drift":[],"actions":[],"last_good":"{GOOD}"}}',
        PlaygroundFinding("running", last_good=GOOD),
    ),
    "first-verified": (
        f'{{"state":"running","drift":["app: missing"],"actions":["compose up"],'
        f'"health":"healthy","last_good":"{GOOD}"}}',
        PlaygroundFinding(
            "running", ("app: missing",), ("compose up",), last_good=GOOD, health="healthy"
        ),
    ),
    "pending": (
        '{"state":"running","drift":["override changed"],"actions":["write","up"],'
        '"health":"pending"}',
        PlaygroundFinding("running", ("override changed",), ("write", "up"), health="pending"),
    ),
    "unhealthy-rolled-back": (
        f'{{"state":"running","drift":["override changed"],"actions":["up","rollback"],'
        f'"last_good":"{GOOD}","health":"unhealthy","unhealthy":{{"app":"unhealthy: refused"}},'
        f'"rollback":"{WHY}","rollback_health":"healthy"}}',
        PlaygroundFinding(
            "running",
            ("override changed",),
            ("up", "rollback"),
            last_good=GOOD,
            rollback=WHY,
            health="unhealthy",
            unhealthy={"app": "unhealthy: refused"},
            rollback_health="healthy",
        ),
    ),
    "held": (
        f'{{"state":"running","drift":[],"actions":[],"last_good":"{GOOD}","health":"held",'
        '"held":"inputs 0123456789ab failed (app: exited); not retried until they change"}',
        PlaygroundFinding(
            "running",
            last_good=GOOD,
            health="held",
            held="inputs 0123456789ab failed (app: exited); not retried until they change",
        ),
    ),
    "kept-on-last-good": (
        f'{{"state":"running","drift":[],"actions":[],"last_good":"{GOOD}","rollback":"{WHY}"}}',
        PlaygroundFinding("running", last_good=GOOD, rollback=WHY),
    ),
}
"""Findings as reconcile_playgrounds wrote them before their shape was typed (key order as it
wrote them), and what they read as."""


def record_with(playgrounds: Any, *, phase: str = "reconcile_playgrounds") -> dict[str, Any]:
    result = CycleResult(marquee="edge-1", cycle_id="0123456789ab", fence=7)
    result.outcome = Outcome.OK
    result.findings = {phase: {"playgrounds": playgrounds}}
    result.finished_at, result.duration = 1_796_000_000.5, 1.25
    return dict(result.to_record())


@pytest.mark.parametrize("case", sorted(WRITTEN_BEFORE))
def test_a_finding_written_before_reads_as_its_typed_shape(case: str) -> None:
    stored, expected = WRITTEN_BEFORE[case]
    findings = {"reconcile_playgrounds": {"playgrounds": {"web": json.loads(stored)}}}
    assert playground_findings(findings) == {"web": expected}


@pytest.mark.parametrize("case", sorted(WRITTEN_BEFORE))
def test_the_encoder_writes_the_json_written_before(case: str) -> None:
    stored, finding = WRITTEN_BEFORE[case]
    encoded = json.dumps(finding.to_json(), separators=(",", ":"))
    assert json.loads(encoded) == json.loads(stored)
    if case not in ("first-verified", "unhealthy-rolled-back"):
        # Two findings had their keys in the order the phase reached them; all others keep the
        # very bytes (JSON objects are unordered: every reader parses them).
        assert encoded == stored


def test_findings_go_through_a_stored_record_and_back_unchanged() -> None:
    written = {case: finding for case, (_, finding) in WRITTEN_BEFORE.items()}
    record = record_with({name: finding.to_json() for name, finding in written.items()})
    stored = decoded_record(encode_record(record, 64 * 1024))

    assert playground_findings(stored["findings"]) == written
    assert last_good_states(stored) == {
        name: GOOD for name, finding in written.items() if finding.last_good is not None
    }
    finished = datetime.fromtimestamp(1_796_000_000.5, UTC)
    assert playground_rows(stored)[0] == (
        "expired", "edge-1", "expired", json.dumps(["expired at 2026-01-01T00:00:00+00:00"]),
        "take down playground web (expired at 2026-01-01T00:00:00+00:00)", "0123456789ab",
        finished, None, None, None,
    )  # fmt: skip


HOSTILE: dict[str, tuple[Any, dict[str, PlaygroundFinding]]] = {
    "findings-a-list": ([1, 2], {}),
    "findings-a-string": ("playgrounds", {}),
    "phase-findings-a-list": ({"reconcile_playgrounds": ["web"]}, {}),
    "playgrounds-a-list": ({"reconcile_playgrounds": {"playgrounds": ["web"]}}, {}),
    "playgrounds-null": ({"reconcile_playgrounds": {"playgrounds": None}}, {}),
    "finding-a-string": ({"p": {"playgrounds": {"web": "running"}}}, {}),
    "finding-null": ({"p": {"playgrounds": {"web": None}}}, {}),
    "finding-a-number": ({"p": {"playgrounds": {"web": 3}}}, {}),
    "name-not-a-string": ({"p": {"playgrounds": {7: {"state": "running"}}}}, {}),
    "empty-finding": ({"p": {"playgrounds": {"web": {}}}}, {"web": PlaygroundFinding(None)}),
    "state-a-number": (
        {"p": {"playgrounds": {"web": {"state": 1, "drift": ["x"]}}}},
        {"web": PlaygroundFinding(None, ("x",))},
    ),
    "state-a-bool": (
        {"p": {"playgrounds": {"web": {"state": True}}}},
        {"web": PlaygroundFinding(None)},
    ),
    "drift-a-string": (
        {"p": {"playgrounds": {"web": {"state": "running", "drift": "changed"}}}},
        {"web": PlaygroundFinding("running")},
    ),
    "drift-of-mixed-items": (
        {"p": {"playgrounds": {"web": {"state": "running", "drift": ["a", 1, None, ["b"], "c"]}}}},
        {"web": PlaygroundFinding("running", ("a", "c"))},
    ),
    "actions-an-object": (
        {"p": {"playgrounds": {"web": {"state": "running", "actions": {"up": 1}}}}},
        {"web": PlaygroundFinding("running")},
    ),
    "last-good-a-number": (
        {"p": {"playgrounds": {"web": {"state": "running", "last_good": 12}}}},
        {"web": PlaygroundFinding("running")},
    ),
    "last-good-an-object": (
        {"p": {"playgrounds": {"web": {"state": "running", "last_good": {"app": GOOD}}}}},
        {"web": PlaygroundFinding("running")},
    ),
    "unhealthy-a-list": (
        {"p": {"playgrounds": {"web": {"state": "running", "unhealthy": ["app"]}}}},
        {"web": PlaygroundFinding("running")},
    ),
    "unhealthy-of-mixed-values": (
        {"p": {"playgrounds": {"web": {"state": "running", "unhealthy": {"a": "x", "b": 2}}}}},
        {"web": PlaygroundFinding("running", unhealthy={"a": "x"})},
    ),
    "health-and-held-not-strings": (
        {
            "p": {
                "playgrounds": {
                    "web": {
                        "state": "running",
                        "health": 0,
                        "held": [],
                        "rollback": False,
                        "rollback_health": {},
                    }
                }
            }
        },
        {"web": PlaygroundFinding("running")},
    ),
    "unknown-fields-ignored": (
        {"p": {"playgrounds": {"web": {"state": "running", "colour": "blue"}}}},
        {"web": PlaygroundFinding("running")},
    ),
    "one-bad-finding-among-good": (
        {"p": {"playgrounds": {"bad": "x", "web": {"state": "stopped"}}}},
        {"web": PlaygroundFinding("stopped")},
    ),
}
"""A record's ``findings`` as anything with access to Redis may have left them, and what they
read as: what is not in the written shape is absent, the rest still reads."""


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_findings_not_in_the_written_shape_read_as_absent(case: str) -> None:
    findings, expected = HOSTILE[case]
    assert playground_findings(findings) == expected


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_stored_record_with_hostile_findings_is_read_without_error(case: str) -> None:
    findings, expected = HOSTILE[case]
    record = {**record_with({}), "findings": findings}

    assert last_good_states(record) == {
        name: finding.last_good for name, finding in expected.items() if finding.last_good
    }
    assert LastCycle.from_record(record).outcome == "ok"
    rows = playground_rows(record)
    assert [row[0] for row in rows] == [
        name for name, finding in expected.items() if finding.state is not None
    ]
