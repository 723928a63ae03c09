"""The rollout record's steps, as pure functions of a reading: waves complete, bake, the failure
budget, operators' actions, and what a garbage record reads as."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import cast

import pytest

from playguard_async.desired_state.rollout_policy import RolloutPolicy, admission_key, waves_of
from playguard_async.phases.rollout_record import (
    ABORTED_KEPT,
    EVENTS_KEPT,
    STATUSES,
    SUPERSEDED_KEPT,
    Rollout,
    RolloutRefused,
    Status,
)

SCOPE = "web@main"
TARGET = "a" * 64
T0 = 1_800_000_000.0


def opened(*, bake: float = 10, max_failures: int = 0, cohort: int = 6) -> Rollout:
    policy = RolloutPolicy(waves=[1, "50%", "100%"], bake=bake, max_failures=max_failures,
                           wave_timeout=60)  # fmt: skip
    keys = [admission_key(SCOPE, f"m{i}", canary=False) for i in range(cohort)]
    return Rollout.open(SCOPE, TARGET, "b" * 40, policy, waves_of(policy, keys), now=T0)


@pytest.mark.parametrize(
    ("complete", "now", "wave", "healthy_at"),
    [
        (False, T0 + 100, 0, None),  # not each Marquee verified or failed: nothing due
        (True, T0 + 1, 0, T0 + 1),  # wave complete: its bake starts
    ],
)
def test_a_wave_completes_when_each_of_its_marquees_is_verified(
    complete: bool, now: float, wave: int, healthy_at: float | None
) -> None:
    step = opened().progressed(complete, now)
    rollout = step or opened()
    assert (rollout.wave, rollout.healthy_at) == (wave, healthy_at)


def test_the_next_wave_starts_only_after_the_bake_and_only_if_it_may() -> None:
    baking = opened().progressed(True, T0 + 1)
    assert baking is not None
    assert baking.progressed(False, T0 + 10.9) is None
    assert baking.progressed(False, T0 + 11, may_start=False) is None
    started = baking.progressed(False, T0 + 11)
    assert started is not None
    assert (started.wave, started.started) == (1, T0 + 11)
    assert started.events[-1].what == "wave 2 started"


@pytest.mark.parametrize(
    ("after", "healthy_at", "stalled"),
    [(119.0, None, False), (120.0, None, True), (120.0, T0 + 5, False)],
)
def test_a_wave_incomplete_at_twice_its_timeout_has_stalled_and_halts_naming_whom_it_waits_for(
    after: float, healthy_at: float | None, stalled: bool
) -> None:
    rollout = replace(opened(), healthy_at=healthy_at)
    assert rollout.stalled(T0 + after) is stalled
    halted = rollout.with_stall([f"m{i}" for i in range(12)], T0 + after)
    assert halted.status == "halted"
    assert halted.why.startswith("wave 1 stalled: 12 Marquee(s)")
    assert halted.why.endswith("m0, m1, m2, m3, m4, m5, m6, m7, m8, m9 and 2 more")


def test_the_last_wave_baked_is_done_and_a_done_rollout_admits_everyone() -> None:
    last = replace(opened(), wave=2, healthy_at=T0)
    done = last.progressed(False, T0 + 10, may_start=False)
    assert done is not None
    assert done.status == "done"
    assert done.admits("1ffff", at_target=False)


@pytest.mark.parametrize(("max_failures", "status"), [(0, "halted"), (1, "running")])
def test_failures_past_the_budget_halt(max_failures: int, status: str) -> None:
    failed = opened(max_failures=max_failures).with_failure("m1", 0, "unhealthy", T0 + 3)
    assert failed is not None
    assert failed.status == status
    assert failed.with_failure("m1", 0, "again", T0 + 4) is None  # counted once


def test_a_halted_or_paused_rollout_admits_only_marquees_already_at_the_target() -> None:
    rollout = opened()
    key = admission_key(SCOPE, "m0", canary=True)
    for status in ("halted", "paused", "aborted"):
        stopped = replace(rollout, status=status)
        assert not stopped.admits(key, at_target=False)
        assert stopped.admits(key, at_target=True) == (status != "aborted")
    assert rollout.admits(key, at_target=False)  # canaries are in wave 1


@pytest.mark.parametrize(
    ("status", "action", "allowed"),
    [(s, a, a in ok) for s, ok in {
        "running": ("promote", "pause", "abort"), "paused": ("promote", "resume", "abort"),
        "halted": ("promote", "abort"), "aborted": (), "done": (),
    }.items() for a in ("promote", "pause", "resume", "abort")],
)  # fmt: skip
def test_operators_actions_follow_the_status(status: Status, action: str, allowed: bool) -> None:
    rollout = replace(opened(), status=status)
    if not allowed:
        with pytest.raises(RolloutRefused, match=status):
            rollout.by_operator(action, "alice@h", "why", T0)
        return
    changed = rollout.by_operator(action, "alice@h", "because", T0 + 5)
    assert (changed.events[-1].by, changed.events[-1].why) == ("alice@h", "because")


def test_promote_starts_the_next_wave_and_lifts_a_halt_with_the_budget_whole() -> None:
    halted = opened().with_failure("m1", 0, "unhealthy", T0 + 1)
    assert halted is not None
    assert halted.status == "halted"
    promoted = halted.by_operator("promote", "alice@h", "known flake", T0 + 2)
    assert (promoted.status, promoted.wave, promoted.failed_count) == ("running", 1, 0)
    assert promoted.failed("m1")


def test_the_stored_form_reads_back_and_events_stay_bounded() -> None:
    rollout = opened()
    for index in range(EVENTS_KEPT * 3):
        rollout = rollout.by_operator("pause" if index % 2 == 0 else "resume", "a@h", "x", T0)
    assert len(rollout.events) == EVENTS_KEPT
    assert Rollout.parse(SCOPE, rollout.encode()) == rollout


def _mutations() -> list[object]:
    good = json.loads(opened().encode())
    changed: list[object] = []
    for name in good:
        values: tuple[object, ...] = (None, True, -1, 1e300, "x", [], {}, "\x1b[31m" * 1000)
        for value in values:
            changed.append({**good, name: value})
        changed.append({k: v for k, v in good.items() if k != name})
    return changed


@pytest.mark.parametrize(
    "raw",
    [b"", b"\xff\xfe", b"[]", b"null", b"1", b"x" * 70_000, b"[" * 100_000,
     json.dumps({"scope": "other@main"}).encode()]
    + [json.dumps(value).encode() for value in _mutations()],
)  # fmt: skip
def test_a_record_not_of_the_written_form_reads_as_none_or_as_a_bounded_record(
    raw: bytes,
) -> None:
    parsed = Rollout.parse(SCOPE, raw)
    # A mutation the record tolerates is a text field holding another string: kept bounded.
    assert parsed is None or (
        len(parsed.why) <= 500 and all(len(event.why) <= 500 for event in parsed.events)
    )


@pytest.mark.parametrize("count", [1, ABORTED_KEPT, ABORTED_KEPT + 3])
@pytest.mark.parametrize("ends", ["aborted", "halted", "done", "running"])
def test_a_newer_release_carries_the_aborted_releases_before_it_through_its_stored_form(
    count: int, ends: str
) -> None:
    """Releases open one after another, every other one aborted; each record names the aborted
    ones before it (the last ABORTED_KEPT) and its own target only once it is aborted itself;
    a record written before the field existed names only its own."""
    record: Rollout | None = None
    releases = [f"{index:064x}" for index in range(count)]
    aborted: list[str] = []
    for index, release in enumerate(releases):
        now = replace(opened(), target=release)
        now = Rollout.open(SCOPE, release, None, now.policy, now.waves, now=T0, after=record)
        status = ends if index == count - 1 else ("aborted" if index % 2 == 0 else "done")
        now = replace(now, status=cast(Status, status)).stored_over(record)
        assert Rollout.parse(SCOPE, now.encode()) == now
        assert now.aborted == frozenset(
            (*aborted, *[release] * (status == "aborted"))[-ABORTED_KEPT:]
        )
        aborted += [release] * (status == "aborted")
        record = now
    assert record is not None
    old_form = record.to_json()
    del old_form["aborted_before"]
    legacy = Rollout.parse(SCOPE, json.dumps(old_form))
    assert legacy is not None
    assert legacy.aborted == frozenset([releases[-1]] * (ends == "aborted"))


@pytest.mark.parametrize("count", [1, 2, SUPERSEDED_KEPT + 1, SUPERSEDED_KEPT + 4])
def test_a_newer_release_names_every_release_the_scope_moved_past_through_its_stored_form(
    count: int,
) -> None:
    """Each record names the targets of the rollouts before it (the last SUPERSEDED_KEPT),
    never its own, whatever they ended as; a record written before the field existed names
    none; a garbage entry makes the record unreadable."""
    record: Rollout | None = None
    releases = [f"{index:064x}" for index in range(count)]
    for index, release in enumerate(releases):
        now = replace(opened(), target=release)
        now = Rollout.open(SCOPE, release, None, now.policy, now.waves, now=T0, after=record)
        now = replace(now, status=STATUSES[index % len(STATUSES)]).stored_over(record)
        assert Rollout.parse(SCOPE, now.encode()) == now
        assert now.superseded_before == tuple(releases[:index][-SUPERSEDED_KEPT:])
        record = now
    assert record is not None
    old_form = record.to_json()
    del old_form["superseded_before"]
    legacy = Rollout.parse(SCOPE, json.dumps(old_form))
    assert legacy is not None
    assert legacy.superseded_before == ()
    assert Rollout.parse(SCOPE, json.dumps({**old_form, "superseded_before": ["HEAD~1"]})) is None


def _decided(action: str) -> Rollout:
    """``opened()`` after ``action``: an operator's, ``halt`` (a failure past the budget), or
    ``none``."""
    rollout = opened()
    if action == "halt":
        halted = rollout.with_failure("m1", 0, "unhealthy", T0 + 1)
        assert halted is not None
        return halted
    return rollout if action == "none" else rollout.by_operator(action, "a@h", "x", T0 + 1)


OTHER = "c" * 64
"""A release that opened after TARGET's rollout (a fork's record of the scope)."""


@pytest.mark.parametrize(
    ("kept", "redis", "lifted_at", "status"),
    [
        ("abort", "none", None, "aborted"),  # an abort is final
        ("abort", "halt", None, "aborted"),
        ("abort", "abort", None, None),
        ("halt", "none", None, "halted"),  # the older copy won the count
        ("halt", "none", T0 + 2, None),  # a promote after the halt lifted it
        ("halt", "none", T0 - 1, "halted"),  # a promote before it did not
        ("pause", "none", None, "paused"),
        ("pause", "none", T0 + 2, None),  # a resume after it
        ("pause", "promoted", T0 + 2, None),  # a promote lifts a pause too
        ("none", "halt", None, None),  # Redis's decision stands
        ("none", "none", None, None),
        ("halt", "other release", None, None),  # the scope's desired state moved
        ("abort", "other release", None, "running"),  # the abort is carried, not the status
    ],
)
def test_a_record_takes_back_the_decisions_a_copy_kept_that_it_lacks(
    kept: str, redis: str, lifted_at: float | None, status: Status | None
) -> None:
    """Two replicas that rebuilt from copies of different ages count their writes from the
    same number: a copy no newer than Redis's record may still hold a decision it lacks."""
    copy = _decided(kept)
    if redis == "other release":
        record = Rollout.open(SCOPE, OTHER, None, copy.policy, copy.waves, now=T0 + 3)
    else:
        record = _decided("none" if redis == "promoted" else redis)
    if lifted_at is not None:
        lift = "promote" if redis == "promoted" or copy.status == "halted" else "resume"
        record = replace(
            record, events=(*record.events, replace(record.events[-1], at=lifted_at, what=lift))
        )
    taken = record.with_decisions_of(copy, T0 + 9)
    if status is None:
        assert taken is None
        return
    assert taken is not None
    assert (taken.status, taken.id, taken.seq) == (status, record.id, record.seq)
    assert taken.aborted == record.aborted | copy.aborted
    assert (taken.events[-1].what, taken.events[-1].at) == ("rebuilt", T0 + 9)
    assert taken.with_decisions_of(copy, T0 + 10) is None, "once is enough"
