"""Which Marquees an operator's rollout action is put on, and how the command says which carry it
(``operator.rollout_hosts``); the writes themselves are tested on the lab
(``tests/integration/test_rollout_hosts.py``)."""

from __future__ import annotations

from typing import Any

from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.rollout_policy import RolloutPolicy, Wave
from playguard_async.operator.host_copies import HostCopy
from playguard_async.operator.rollout_hosts import Acted, scope_marquees
from playguard_async.phases.rollout_record import Rollout
from tests.support.daemon import marquee_entry


def world(**marquees: dict[str, Any]) -> Inventory:
    """Marquees ``name -> extra fields``, each with a Playground of ``web@main`` and one of
    ``web@other``, and ``off-state`` with a stopped one of ``web@main``."""
    playgrounds = [
        {"name": f"{name}-{branch}", "playspec": "web", "marquee": name, "branch": branch}
        for name in marquees
        for branch in ("main", "other")
    ]
    return Inventory.model_validate({
        "marquees": [{**marquee_entry(name), **extra} for name, extra in marquees.items()],
        "playspecs": [{"name": "web", "repo": "https://git.example/web.git"}],
        "playgrounds": [*playgrounds, {"name": "stopped-main", "playspec": "web",
                                       "marquee": "m1", "branch": "main", "state": "stopped"}],
    })  # fmt: skip


def test_the_scopes_cohort_is_written_its_running_playgrounds_named() -> None:
    inventory = world(
        m2={}, m1={}, detecting={"mode": "detect"}, off={"mode": "off"},
        aside={"launchable": False},
    )  # fmt: skip

    found = scope_marquees(inventory, "web@main")

    assert {marquee.name: names for marquee, names in found.items()} == {
        "m1": ["m1-main"],
        "m2": ["m2-main"],
    }
    assert list(scope_marquees(inventory, "web@nothing")) == []


def acted(*hosts: HostCopy) -> Acted:
    policy = RolloutPolicy(waves=[1, "100%"])
    record = Rollout.open("web@main", "a" * 64, None, policy, (Wave("0", 1), Wave("~", 1)),
                          now=1e9).stored_over(None)  # fmt: skip
    return Acted(record, hosts)


def test_the_output_counts_the_hosts_that_carry_it_and_names_the_others_with_why() -> None:
    every = acted(HostCopy("m1", True, "written (seq 1)"), HostCopy("m2", True, "had it"))
    some = acted(
        HostCopy("m1", True, "written (seq 1)"),
        HostCopy("m2", False, "unreachable: m2 (127.0.0.1:22): cannot connect over SSH"),
    )

    assert every.on_every_host
    assert every.host_lines() == ["  on the hosts: 2 of 2 Marquees carry it"]
    assert not some.on_every_host
    assert some.host_lines() == [
        "  on the hosts: 1 of 2 Marquees carry it",
        "  m2: not yet: unreachable: m2 (127.0.0.1:22): cannot connect over SSH",
        "  the record in Redis stands: those read it there at their next cycle",
    ]
    assert [host.as_json() for host in some.hosts][1] == {
        "marquee": "m2", "carries": False,
        "detail": "unreachable: m2 (127.0.0.1:22): cannot connect over SSH",
    }  # fmt: skip
