"""The labels that come from the desired state (``playspec`` on rollbacks, ``rollout`` on the
rollout series) number at most what the desired state in force holds: a Playspec deleted or a
branch changed leaves the series at the next tick, so a halted rollout's gauge goes (its alert
resolves) and 300 Playspecs come and gone leave no 300 series behind."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from playguard_async.cycle_record import RolloutFinding
from playguard_async.desired_state.model import Inventory
from playguard_async.service.metrics import GONE_PLAYSPEC, Metrics

HALTED = RolloutFinding(
    status="halted", wave=1, waves=3, release="r", held=False, failed_here=True,
    halted_here="max_failures",
)  # fmt: skip


def inventory_of(playgrounds: dict[str, str]) -> Inventory:
    """One Marquee with one Playground per ``playspec: branch``, each Playspec its own."""
    return Inventory.model_validate(
        {
            "marquees": [
                {"name": "m1", "host": "127.0.0.1", "user": "root",
                 "identity_file": Path("/nonexistent/id"),
                 "known_hosts": Path("/nonexistent/known_hosts")},
            ],
            "playspecs": [
                {"name": name, "repo": "https://git.example.net/app.git"} for name in playgrounds
            ],
            "playgrounds": [
                {"name": f"pg-{name}", "playspec": name, "marquee": "m1", "branch": branch}
                for name, branch in playgrounds.items()
            ],
        }
    )  # fmt: skip


def labels(metrics: Metrics, family: str, label: str) -> set[str]:
    return {
        sample.labels[label]
        for metric in metrics.registry.collect()
        if metric.name == family
        for sample in metric.samples
    }


def seen_in(metrics: Metrics, playgrounds: dict[str, str]) -> None:
    """Each Playground rolled back once and its rollout seen halted."""
    for name, branch in playgrounds.items():
        metrics.rolled_back(name)
        metrics.rollout_seen(f"{name}@{branch}", HALTED)


ROLLOUT_FAMILIES = tuple(f"playguard_rollout_{name}" for name in ("wave", "halted", "failed"))
NAMES = st.sampled_from([f"spec{number}" for number in range(12)])
BRANCHES = st.sampled_from(["main", "feature/a", "release-1"])
DESIRED = st.dictionaries(NAMES, BRANCHES, max_size=8)


@given(before=DESIRED, after=DESIRED)
def test_labels_follow_the_desired_state_at_each_tick(
    before: dict[str, str], after: dict[str, str]
) -> None:
    metrics = Metrics(outcomes=["ok"], lock_ttl=10.0, marquees_shown=10)
    desired = inventory_of(before)
    metrics.follow_desired_state(lambda: desired)
    seen_in(metrics, before)
    metrics.rolled_back(GONE_PLAYSPEC)
    desired = inventory_of(after)
    metrics.fleet_shared(1, frozenset({"m1"}))
    kept = {name for name in before if name in after}
    assert labels(metrics, "playguard_rollbacks", "playspec") == kept | {GONE_PLAYSPEC}
    scopes = {f"{name}@{branch}" for name, branch in before.items() if after.get(name) == branch}
    for family in ROLLOUT_FAMILIES:
        assert labels(metrics, family, "rollout") == scopes, family
    sample = metrics.registry.get_sample_value
    for scope in scopes:  # what stays keeps its figures
        assert sample("playguard_rollout_halted", {"rollout": scope}) == 1
        assert sample("playguard_rollbacks_total", {"playspec": scope.split("@")[0]}) == 1


def test_a_deleted_playspecs_halted_rollout_leaves_and_comes_back_from_zero() -> None:
    metrics = Metrics(outcomes=["ok"], lock_ttl=10.0, marquees_shown=10)
    desired: Inventory | None = inventory_of({"web": "main"})
    metrics.follow_desired_state(lambda: desired)
    seen_in(metrics, {"web": "main"})
    desired = None  # no desired state read yet: nothing is forgotten for want of one
    metrics.fleet_shared(0, frozenset())
    assert labels(metrics, "playguard_rollout_halted", "rollout") == {"web@main"}
    desired = inventory_of({})
    metrics.fleet_shared(1, frozenset())
    assert labels(metrics, "playguard_rollout_halted", "rollout") == set()
    assert labels(metrics, "playguard_rollbacks", "playspec") == set()
    desired = inventory_of({"web": "main"})
    metrics.rolled_back("web")
    metrics.fleet_shared(1, frozenset({"m1"}))
    assert metrics.registry.get_sample_value("playguard_rollbacks_total", {"playspec": "web"}) == 1


def test_three_hundred_playspecs_come_and_gone_leave_no_series() -> None:
    metrics = Metrics(outcomes=["ok"], lock_ttl=10.0, marquees_shown=10)
    desired = inventory_of({})
    metrics.follow_desired_state(lambda: desired)
    for number in range(300):
        desired = inventory_of({f"spec{number}": "main"})
        seen_in(metrics, {f"spec{number}": "main"})
        metrics.fleet_shared(1, frozenset({"m1"}))
    assert labels(metrics, "playguard_rollbacks", "playspec") == {"spec299"}
    assert labels(metrics, "playguard_rollout_wave", "rollout") == {"spec299@main"}
