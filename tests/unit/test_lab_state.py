"""The lab's state file is outside input by the time ``lab down`` reads it, and ``lab down``'s
summary of a demo run is arithmetic on records: both are pure, tested here without servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playguard_async.coordination.marquee_reads import LastCycle
from playguard_lab.detached import LabStateError, parse_state
from playguard_lab.summary import marquee_summary, outcome_counts

SOURCE = Path("/lab/lab-state.json")
GOOD_SERVER = {"name": "redis", "workdir": "servers/redis", "pid": 4242, "started": 99}


def state_with(**server: object) -> str:
    return json.dumps({"version": 1, "boot_id": "b", "servers": [{**GOOD_SERVER, **server}]})


def test_a_state_as_lab_up_writes_it_parses() -> None:
    state = parse_state(state_with(), SOURCE)
    assert state.boot_id == "b"
    [server] = state.servers
    assert (server.name, server.workdir, server.pid, server.started) == (
        "redis", "servers/redis", 4242, 99,
    )  # fmt: skip
    assert server.label == "redis 4242 (redis)"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "not JSON"),
        ("{", "not JSON"),
        ("[" * 100_000, "not JSON"),
        ("[]", "not a JSON object but []"),
        ('"x"', 'not a JSON object but "x"'),
        ('{"version": 2, "boot_id": "b", "servers": []}', "version 2, expected 1"),
        ('{"boot_id": "b", "servers": []}', "version null, expected 1"),
        ('{"version": 1, "boot_id": 7, "servers": []}', "boot_id 7 is not a boot id"),
        ('{"version": 1, "boot_id": "", "servers": []}', 'boot_id "" is not a boot id'),
        ('{"version": 1, "boot_id": "b", "servers": {}}', "servers {} is not a list"),
        (json.dumps({"version": 1, "boot_id": "b", "servers": [GOOD_SERVER] * 257}), "at most 256"),
        ('{"version": 1, "boot_id": "b", "servers": [3]}', "servers[0] is not an object but 3"),
        (state_with(name="init"), 'servers[0].name "init" is not one of'),
        (state_with(name=None), "servers[0].name null is not one of"),
        (state_with(workdir="/etc"), 'workdir "/etc" is not a path under servers/'),
        (state_with(workdir="servers/../.."), "is not a path under servers/"),
        (state_with(workdir="config/x"), "is not a path under servers/"),
        (state_with(workdir="servers"), "is not a path under servers/"),
        (state_with(workdir="servers/x\u0000"), "is not a path under servers/"),
        (state_with(workdir=["servers"]), "is not a path under servers/"),
        (state_with(pid="4242"), 'pid "4242" is not a process id'),
        (state_with(pid=True), "pid true is not a process id"),
        (state_with(pid=1), "pid 1 is not a process id"),
        (state_with(pid=-5), "pid -5 is not a process id"),
        (state_with(pid=4242.0), "pid 4242.0 is not a process id"),
        (state_with(pid=10**40), "is not a process id"),
        (state_with(started=-1), "started -1 is not a start time"),
        (state_with(started=None), "started null is not a start time"),
        (state_with(address=5), "address 5 is not an address"),
        (state_with(address="x" * 300), 'address "xxxxx'),
    ],
)
def test_a_garbage_state_is_one_line_naming_the_file_and_the_field(
    text: str, complaint: str
) -> None:
    with pytest.raises(LabStateError) as refused:
        parse_state(text, SOURCE)
    message = str(refused.value)
    assert message.startswith(f"{SOURCE}: "), message
    assert complaint in message
    assert "\n" not in message
    assert len(message) < 300, "a hostile value is shown cut short"


def cycle(outcome: str, *, dry_run: bool = False, **fields: object) -> LastCycle:
    values: dict[str, object] = {
        "cycle": "c", "outcome": outcome, "phase": None, "reason": None, "fence": 1,
        "host_fence": 1, "finished_at": 1000.0, "duration": 1.5, "actions": 0, "drift": {},
        "branch_gone": {}, "failed": [], "dry_run": dry_run, **fields,
    }  # fmt: skip
    return LastCycle(**values)  # type: ignore[arg-type]


def test_outcomes_are_counted_most_frequent_first_with_dry_runs_apart() -> None:
    history = [cycle("ok"), cycle("unreachable"), cycle("ok"), cycle("ok", dry_run=True)]
    assert outcome_counts(history) == "2 ok, 1 unreachable, 1 ok (dry run)"


def test_a_marquee_summary_names_its_cycles_and_the_last_result() -> None:
    history = [
        cycle("phase_failed", phase="pull_images", reason="pull refused", actions=1),
        cycle("ok", actions=5, duration=2.4),
    ]
    assert marquee_summary("marquee-0", history, now=1003.0) == (
        "marquee-0: 2 cycles (1 phase_failed, 1 ok); "
        "last: phase_failed (pull_images, pull refused), 1 action in 1.5 s, 3.0 s ago"
    )
    assert marquee_summary("marquee-1", [], now=0.0) == "marquee-1: no cycle recorded"
