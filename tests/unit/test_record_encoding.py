"""Cycle records as stored in Redis: compact, never over their byte bound, and never without the
outcome, whatever the phases put in them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from playguard_async.coordination.marquee_reads import LastCycle
from playguard_async.coordination.records import MIN_RECORD_BYTES, TRUNCATED_MARK, encode_record
from playguard_async.cycle_record import KEPT_FIELDS, CycleRecord
from playguard_async.engine.results import CycleResult, Outcome

texts = st.text(max_size=3_000)
notices = st.lists(
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["drift", "failed", "branch_gone"]), "subject": texts,
         "detail": texts}
    ),
    max_size=8,
)  # fmt: skip


def result_with(**fields: Any) -> dict[str, Any]:
    result = CycleResult(marquee="edge-1", cycle_id="0123456789ab", fence=7)
    result.outcome = Outcome.PHASE_FAILED
    result.phase = "reconcile_playgrounds"
    for name, value in fields.items():
        setattr(result, name, value)
    result.finished_at, result.duration = 1_796_000_000.5, 1.25
    return dict(result.to_record())


@settings(max_examples=60, deadline=None)
@given(
    phase_notices=st.dictionaries(st.sampled_from(["sync_git", "sweep_orphans"]), notices),
    findings=st.dictionaries(texts, texts, max_size=5),
    actions=st.dictionaries(texts, st.lists(texts, max_size=5), max_size=3),
    reason=texts,
    max_bytes=st.integers(MIN_RECORD_BYTES, 8_192),
)
def test_a_stored_record_fits_its_bound_and_keeps_its_outcome(
    phase_notices: dict[str, list[dict[str, str]]],
    findings: dict[str, str],
    actions: dict[str, list[str]],
    reason: str,
    max_bytes: int,
) -> None:
    record = result_with(
        notices=phase_notices, findings={"sync_git": findings}, actions=actions, reason=reason
    )
    stored = encode_record(record, max_bytes)
    assert len(stored.encode()) <= max_bytes
    decoded = json.loads(stored)
    for field in ("marquee", "cycle", "outcome", "finished_at", "duration", "fence"):
        assert decoded[field] == record[field]
    parsed = LastCycle.from_record(decoded)
    assert parsed.outcome == "phase_failed", "a truncated record still reads as the engine's"


def test_a_small_record_loses_only_its_empty_fields() -> None:
    record = result_with(actions={"sync_git": [], "pull_images": ["pull app:1"]})
    decoded = json.loads(encode_record(record, 4_096))
    assert decoded == {
        key: value
        for key, value in record.items()
        if value not in (None, "", {}, []) and key != "actions"
    } | {"actions": {"pull_images": ["pull app:1"]}}
    assert "truncated" not in decoded


def test_big_notices_are_cut_with_a_mark_before_anything_else_goes() -> None:
    notice = {"kind": "failed", "subject": "playground-3", "detail": "compose says no\n" * 500}
    record = result_with(
        notices={"reconcile_playgrounds": [notice, notice]},
        findings={"reconcile_playgrounds": {"changed": 1}},
    )
    decoded = json.loads(encode_record(record, 4_096))
    details = [n["detail"] for n in decoded["notices"]["reconcile_playgrounds"]]
    assert len(details) == 2
    assert all(detail.endswith(TRUNCATED_MARK) for detail in details)
    assert decoded["truncated"] == {"notice_details": 2}
    assert decoded["findings"] == {"reconcile_playgrounds": {"changed": 1}}


@pytest.mark.parametrize("count", [20, 200])
def test_notices_beyond_the_bound_are_dropped_from_the_last_and_counted(count: int) -> None:
    listed = [
        {"kind": "drift", "subject": f"playground-{i}", "detail": "x" * 400} for i in range(count)
    ]
    decoded = json.loads(encode_record(result_with(notices={"sync_git": listed}), 4_096))
    kept = decoded["notices"]["sync_git"]
    assert kept == listed[: len(kept)], "the first notices stay, whole"
    assert decoded["truncated"]["notices"] == count - len(kept) > 0


def test_the_engine_writes_every_field_of_the_record_schema_and_no_other() -> None:
    written = CycleResult(marquee="m", cycle_id="c").to_record()
    assert set(written) == set(CycleRecord.__annotations__)
    assert set(KEPT_FIELDS) <= set(written)


@pytest.mark.parametrize("branches", [10, 100, 1_000])
def test_a_repository_with_many_branches_never_pushes_out_the_notices(branches: int) -> None:
    """fetch_branches lists every branch of each Playspec's repository, as many as there are:
    over the bound, those names go before any notice an operator reads."""
    names = [f"test-{n:08x}" for n in range(branches)]
    record = {
        "marquee": "m1", "cycle": "c1", "outcome": "unhealthy", "finished_at": 1.0,
        "duration": 1.0,
        "findings": {"fetch_branches": {"branches": {"web": names}}},
        "notices": {"reconcile_playgrounds": [
            {"kind": "unhealthy", "subject": "web-main", "detail": "app: unhealthy"},
        ]},
    }  # fmt: skip
    stored = json.loads(encode_record(record, 1_024))
    assert stored["notices"] == record["notices"]
    if len(json.dumps(record)) > 1_024:
        assert "branches" not in stored["findings"]["fetch_branches"]
        assert stored["truncated"]["branches"] == branches
