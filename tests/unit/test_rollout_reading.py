"""A rollout record as a cycle reads it: parsed once while unchanged (every cycle of a cohort
reads it, bench/README.md "Rollouts"), anew as soon as it changes, and garbage reported at each
reading, never kept."""

from __future__ import annotations

from dataclasses import replace

from structlog.testing import capture_logs

from playguard_async.coordination.rollouts import RolloutRead
from playguard_async.desired_state.rollout_policy import RolloutPolicy, admission_key, waves_of
from playguard_async.phases.rollout_desk import _parsed
from playguard_async.phases.rollout_record import Rollout

SCOPE = "reading@main"
T0 = 1_800_000_000.0


def opened() -> Rollout:
    policy = RolloutPolicy(waves=[1, "100%"], bake=10)
    keys = [admission_key(SCOPE, f"m{i}", canary=False) for i in range(4)]
    return Rollout.open(SCOPE, "c" * 64, "d" * 40, policy, waves_of(policy, keys), now=T0)


def read(raw: str) -> RolloutRead:
    return RolloutRead(SCOPE, raw, {}, T0)


def test_a_changed_record_reads_as_the_new_rollout_not_the_one_kept() -> None:
    first = opened()
    second = replace(first, wave=1, started=T0 + 20)
    assert _parsed(read(first.encode())) == first
    assert _parsed(read(first.encode())) is _parsed(read(first.encode()))
    assert _parsed(read(second.encode())) == second
    assert _parsed(read(first.encode())) == first


def test_garbage_after_a_good_record_reads_as_none_and_is_logged_each_time() -> None:
    assert _parsed(read(opened().encode())) is not None
    with capture_logs() as logs:
        assert _parsed(read('{"scope": "reading@main"}')) is None
        assert _parsed(read('{"scope": "reading@main"}')) is None
    assert [line["event"] for line in logs] == ["rollout.unreadable"] * 2
