"""A rollout policy's arithmetic: the waves' sizes for a cohort, the admission order (canaries
first, the same on every replica and after every restart) and the waves a cohort's keys fall
in, table-driven and over generated policies and cohorts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.desired_state.rollout_policy import (
    WAVES_MAX,
    RolloutPolicy,
    admission_key,
    wave_of,
    waves_of,
)

COHORTS = [0, 1, 2, 6, 10_000]

POLICIES = [
    [1, "10%", "50%", "100%"],
    [1, "1%", "10%", "100%"],
    ["100%"],
    [1],
    [5],
    ["50%"],
    [1, 2, 3],
    ["1%", "1%", "2%"],
    [10_000, 1],
    ["100%", 1, "10%"],
    [1_000_000],
    list(range(1, WAVES_MAX + 1)),
]

# (waves, cohort, sizes): ceilings of percentages, a wave adding no one left out, one more
# wave when the policy stops short of the cohort.
SIZES = [
    ([1, "10%", "50%", "100%"], 10_000, (1, 1000, 5000, 10_000)),
    ([1, "10%", "50%", "100%"], 6, (1, 3, 6)),
    ([1, "10%", "50%", "100%"], 2, (1, 2)),
    ([1, "10%", "50%", "100%"], 1, (1,)),
    ([1, "1%", "10%", "100%"], 10_000, (1, 100, 1000, 10_000)),
    (["50%"], 6, (3, 6)),
    (["1%"], 150, (2, 150)),
    ([5], 2, (2,)),
    ([2, 4], 10, (2, 4, 10)),
    ([10_000, 1], 10_000, (10_000,)),
]


@pytest.mark.parametrize(("waves", "cohort", "sizes"), SIZES)
def test_sizes_are_the_cumulative_admissions_of_each_wave(
    waves: list[int | str], cohort: int, sizes: tuple[int, ...]
) -> None:
    assert RolloutPolicy(waves=waves).sizes(cohort) == sizes


def _sizes_hold(policy: RolloutPolicy, cohort: int) -> None:
    sizes = policy.sizes(cohort)
    assert sizes, "at least one wave"
    assert sizes[-1] == cohort, "the last wave takes the whole cohort"
    assert all(0 <= size <= cohort for size in sizes), "never above the cohort"
    assert all(a < b for a, b in pairwise(sizes)), "increasing"
    assert len(sizes) <= WAVES_MAX + 1
    assert policy.staged(cohort) == (len(sizes) > 1)


@pytest.mark.parametrize("waves", POLICIES, ids=str)
@pytest.mark.parametrize("cohort", COHORTS)
def test_sizes_increase_never_pass_the_cohort_and_end_with_it(
    waves: list[int | str], cohort: int
) -> None:
    _sizes_hold(RolloutPolicy(waves=waves), cohort)


WAVE_SIZES = st.one_of(
    st.integers(min_value=1, max_value=1_000_000),
    st.integers(min_value=1, max_value=100).map(lambda percent: f"{percent}%"),
)


@given(
    waves=st.lists(WAVE_SIZES, min_size=1, max_size=WAVES_MAX),
    cohort=st.integers(min_value=0, max_value=200_000),
)
def test_generated_policies_and_cohorts_keep_the_sizes_rules(
    waves: list[int | str], cohort: int
) -> None:
    _sizes_hold(RolloutPolicy(waves=waves), cohort)


def test_one_wave_for_everyone_is_not_staged() -> None:
    assert not RolloutPolicy(waves=["100%"]).staged(10_000)
    assert not RolloutPolicy(waves=[1]).staged(1)
    assert RolloutPolicy(waves=[1, "100%"]).staged(2)


def test_a_policy_encodes_to_json_that_loads_back_equal() -> None:
    policy = RolloutPolicy(waves=[1, "10%"], bake=12.5, max_failures=3, wave_timeout=60)
    assert RolloutPolicy.model_validate(json.loads(policy.encode())) == policy


NAMES = [f"edge-{n}" for n in range(40)]


def test_canaries_come_first_whatever_their_names() -> None:
    canaries = {"edge-39", "edge-7", "edge-20"}
    keys = {name: admission_key("shop\0main", name, canary=name in canaries) for name in NAMES}
    ordered = sorted(NAMES, key=keys.__getitem__)
    assert set(ordered[:3]) == canaries
    assert ordered != sorted(NAMES), "not the name order"


def test_each_scope_has_its_own_order_so_the_same_marquees_are_not_first_everywhere() -> None:
    orders = [
        sorted(NAMES, key=dict(zip(NAMES, _keys(len(NAMES), scope=scope), strict=True)).__getitem__)
        for scope in ("shop\0main", "shop\0next", "blog\0main")
    ]
    assert len({tuple(order) for order in orders}) == 3
    assert len({order[0] for order in orders}) > 1


KEYS_SCRIPT = """
import json, sys
from playguard_async.desired_state.rollout_policy import admission_key
names = json.loads(sys.argv[1])
print(json.dumps([admission_key("shop\\0main", n, canary=n.endswith("7")) for n in names]))
"""


@pytest.mark.parametrize("hash_seed", ["0", "1", "4242"])
def test_the_order_is_the_same_in_every_process(hash_seed: str) -> None:
    """Replicas and restarts: another process, another string-hash seed, the same keys."""
    here = [admission_key("shop\0main", name, canary=name.endswith("7")) for name in NAMES]
    there = subprocess.run(
        [sys.executable, "-c", KEYS_SCRIPT, json.dumps(NAMES)],
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(there.stdout) == here


def _keys(count: int, canaries: int = 0, scope: str = "shop\0main") -> list[str]:
    return [admission_key(scope, f"edge-{n}", canary=n < canaries) for n in range(count)]


@pytest.mark.parametrize("waves", POLICIES, ids=str)
@pytest.mark.parametrize("cohort", COHORTS)
def test_every_key_is_in_exactly_one_wave_and_the_waves_add_up_to_the_cohort(
    waves: list[int | str], cohort: int
) -> None:
    policy = RolloutPolicy(waves=waves)
    keys = _keys(cohort, canaries=min(cohort, 3))
    opened = waves_of(policy, keys)

    assert [wave.size for wave in opened] == [
        size - before
        for before, size in zip((0, *policy.sizes(cohort)), policy.sizes(cohort), strict=False)
    ]
    assert sum(wave.size for wave in opened) == cohort
    found = [wave_of(opened, key) for key in keys]
    assert all(0 <= index < len(opened) for index in found)
    for index, wave in enumerate(opened):
        assert found.count(index) == wave.size, f"wave {index}"
    assert [wave.cutoff for wave in opened] == sorted(wave.cutoff for wave in opened)
    canary_waves = [wave_of(opened, key) for key in keys[:3]]
    others = [wave_of(opened, key) for key in keys[3:]]
    assert not others or not canary_waves or max(canary_waves) <= min(others)


@given(
    waves=st.lists(WAVE_SIZES, min_size=1, max_size=WAVES_MAX),
    cohort=st.integers(min_value=0, max_value=300),
    canaries=st.integers(min_value=0, max_value=300),
)
def test_generated_cohorts_split_into_waves_of_the_policys_sizes(
    waves: list[int | str], cohort: int, canaries: int
) -> None:
    policy = RolloutPolicy(waves=waves)
    keys = _keys(cohort, canaries=min(canaries, cohort))
    opened = waves_of(policy, keys)
    found = [wave_of(opened, key) for key in keys]
    assert [found.count(index) for index in range(len(opened))] == [w.size for w in opened]
    assert sum(wave.size for wave in opened) == cohort


def test_a_key_added_later_lands_in_the_wave_its_place_in_the_order_gives() -> None:
    """The waves hold cutoffs, not names: a Marquee that joins the cohort after the rollout
    opened is in the first wave whose cutoff is at or above its key, the last one above
    every key. (Not always the last wave: a key below a cutoff lands in an earlier one.)"""
    policy = RolloutPolicy(waves=[1, "50%", "100%"])
    opened = waves_of(policy, _keys(6))
    later = [admission_key("shop\0main", f"late-{n}", canary=n == 0) for n in range(50)]
    for key in later:
        expected = next(i for i, wave in enumerate(opened) if key <= wave.cutoff)
        assert wave_of(opened, key) == expected
    assert wave_of(opened, "~~ above every key") == len(opened) - 1
    assert opened[-1].cutoff > max(later), "none falls past the last wave"
