"""The host's pause copies (``phases.pause_copies``): what a copy keeps, which copy an
operator's action writes over, and what a fresh replica reads back from the last one written,
over orders of pause, resume and the pause's end (Redis forgetting between any two steps changes
nothing here: the copy is what is left); which hosts ``pause`` and ``resume`` write
(``operator.pause``). The writes and reads themselves: ``tests/integration/test_pause_hosts.py``."""

from __future__ import annotations

import pytest

from playguard_async.coordination.pause import FLEET, Pause
from playguard_async.operator.host_copies import HostCopy
from playguard_async.operator.pause import PauseActed, paused_marquees
from playguard_async.phases.pause_copies import (
    FLEET_PAUSE_COPY,
    PAUSE_COPY,
    PauseCopy,
    pause_copy,
)
from tests.unit.test_rollout_hosts import world

T0 = 1_900_000_000.0


def taken(at: float, seconds: float = 3600.0, scope: str = "m1") -> PauseCopy:
    return PauseCopy.taken(Pause(scope, "ann", "desk", "incident", at, at + seconds))


def test_a_copy_reads_back_as_written_taken_or_lifted() -> None:
    pause, lift = taken(T0), PauseCopy.lifted("m1", T0 + 5)

    assert PauseCopy.parse("m1", pause.encode()) == pause
    assert PauseCopy.parse("m1", lift.encode()) == lift
    assert (pause_copy("m1"), pause_copy(FLEET)) == (PAUSE_COPY, FLEET_PAUSE_COPY)


@pytest.mark.parametrize("raw", ["", "{", "[]", '{"at": "x", "lifted": true}',
                                 '{"at": 1, "lifted": false, "pause": {"user": 1}}',
                                 # a moment no later decision could ever be written over
                                 '{"at": Infinity, "lifted": true}', '{"at": NaN, "lifted": true}',
                                 '{"at": 1e300, "lifted": true}', '{"at": -1, "lifted": true}',
                                 '{"at": true, "lifted": true}'])  # fmt: skip
def test_a_copy_of_another_form_is_no_pause(raw: str) -> None:
    assert PauseCopy.parse("m1", raw) is None


def written(steps: list[PauseCopy]) -> PauseCopy | None:
    """The host's copy once each step's action was put there, as ``put_pause_copy`` does."""
    there = None
    for copy in steps:
        if copy.replaces(there):
            there = copy
    return there


ORDERS = {
    "pause": ([taken(T0)], True),
    "pause, resume": ([taken(T0), PauseCopy.lifted("m1", T0 + 10)], False),
    "pause, resume, pause again": (
        [taken(T0), PauseCopy.lifted("m1", T0 + 10), taken(T0 + 20)], True,
    ),
    "resume, then an older pause arrives late": (
        [PauseCopy.lifted("m1", T0 + 10), taken(T0)], False,
    ),
    "pause, then a later pause's older twin": ([taken(T0 + 20), taken(T0)], True),
    "a pause that has ended": ([taken(T0 - 7200)], False),
}  # fmt: skip


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_a_fresh_replica_is_held_only_by_a_pause_neither_lifted_nor_ended(order: str) -> None:
    steps, holds = ORDERS[order]
    there = written(steps)

    assert there is not None
    assert (there.holds(T0 + 30) is not None) is holds


def test_a_marquees_pause_goes_on_its_host_and_the_fleets_on_every_launchable_one() -> None:
    inventory = world(m2={}, m1={}, off={"mode": "off"}, aside={"launchable": False})

    assert [m.name for m in paused_marquees(inventory, "m1")] == ["m1"]
    assert [m.name for m in paused_marquees(inventory, FLEET)] == ["m1", "m2", "off"]


def test_pause_and_resume_name_the_hosts_that_do_not_carry_them() -> None:
    some = PauseActed(None, (HostCopy("m1", True, "written (lift)"),
                             HostCopy("m2", False, "unreachable: m2: refused")))  # fmt: skip

    assert not some.on_every_host
    assert some.host_lines() == [
        "  on the hosts: 1 of 2 Marquees carry it",
        "  m2: not yet: unreachable: m2: refused",
        "  the pause in Redis stands: those read it there at their next cycle",
    ]
    assert some.hosts_json()["on_every_host"] is False
