"""A rollout record as a cycle reads it: parsed once while unchanged (every cycle of a cohort
reads it, bench/README.md "Rollouts"), anew as soon as it changes, and garbage reported at each
reading, never kept."""

from __future__ import annotations

from dataclasses import replace

from structlog.testing import capture_logs

from playguard_async.coordination.rollouts import RolloutRead
from playguard_async.desired_state.rollout_policy import RolloutPolicy, admission_key, waves_of
from playguard_async.phases.rollout_reads import parsed_rollout
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
    assert parsed_rollout(read(first.encode())) == first
    assert parsed_rollout(read(first.encode())) is parsed_rollout(read(first.encode()))
    assert parsed_rollout(read(second.encode())) == second
    assert parsed_rollout(read(first.encode())) == first


def test_garbage_after_a_good_record_reads_as_none_and_is_logged_each_time() -> None:
    assert parsed_rollout(read(opened().encode())) is not None
    with capture_logs() as logs:
        assert parsed_rollout(read('{"scope": "reading@main"}')) is None
        assert parsed_rollout(read('{"scope": "reading@main"}')) is None
    assert [line["event"] for line in logs] == ["rollout.unreadable"] * 2
