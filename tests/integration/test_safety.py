"""Three ``playguard run`` replicas on five Marquees: never two in a phase on one Marquee.

The witness phases stamp every phase's enter and exit with ``time.monotonic()``, the clock this
test reads too, so a replica killed or frozen at a known moment can be set against what the others
did on its Marquee. Short ttl and tick keep each scenario within seconds.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from playguard_async.coordination.keys import marquee_lock_key
from playguard_lab import SshServer
from tests.support.daemon import (
    Daemon,
    DaemonRunner,
    Interval,
    fence_problems,
    intervals,
    overlapping_pairs,
    wait_for,
    witness_lines,
)
from tests.support.fencing import host_records, stale_writes
from tests.support.phases import read_witness
from tests.support.world import ssh_marquee

pytestmark = pytest.mark.integration

MARQUEES = ("m1", "m2", "m3", "m4", "m5")
REPLICAS = ("r1", "r2", "r3")
TTL = 3.0
TICK = 0.5
GRACE = 5.0
SHORT_PHASE = 0.3
# Between Redis writing a lease's ttl and the witness stamping the phase's enter; generous for a
# loaded two-core machine running three daemons.
ENTER_LAG = 0.25
FENCED_WRITE = "tests.support.phases:fenced_write"


def start_fleet(daemons: DaemonRunner, phase_seconds: float) -> dict[str, Daemon]:
    daemons.write_inventory(MARQUEES)
    fleet = {
        replica: daemons.start(
            replica,
            phase_seconds=phase_seconds,
            lock_ttl=TTL,
            redis_socket_timeout=0.5,
            tick_interval=TICK,
            max_concurrent_cycles=5,
            shutdown_grace=GRACE,
        )
        for replica in REPLICAS
    }
    for daemon in fleet.values():
        wait_for(daemon_started(daemon), timeout=20, what=f"{daemon.replica} starting")
    return fleet


def daemon_started(daemon: Daemon) -> Callable[[], list[dict[str, Any]]]:
    return lambda: daemon.events("engine.started")


def fresh_enter(
    fleet: dict[str, Daemon], witness_dir: Path, max_age: float
) -> tuple[Daemon, dict[str, Any]] | None:
    """A replica whose last witness line is a phase entered less than ``max_age`` seconds ago.

    Whichever replica it is: which one gets the work depends on how their ticks fall.
    """
    for daemon in fleet.values():
        lines = daemon.witness(witness_dir)
        if lines and lines[-1]["event"] == "enter" and time.monotonic() - lines[-1]["t"] < max_age:
            return daemon, lines[-1]
    return None


def taken_over(witness_dir: Path, victim: Daemon, marquee: str, after: float) -> list[Interval]:
    return [
        interval
        for interval in intervals(witness_lines(witness_dir))
        if interval.marquee == marquee and interval.pid != victim.pid and interval.enter > after
    ]


def assert_clean_stop(daemons: DaemonRunner, fleet: list[Daemon], store: Redis) -> None:
    statuses = daemons.stop_all(fleet, timeout=GRACE + 5)
    assert statuses == {daemon.replica: 0 for daemon in fleet}
    assert list(store.scan_iter(match=marquee_lock_key("*"))) == []


def outcomes(fleet: list[Daemon]) -> Counter[str]:
    return Counter(line["outcome"] for daemon in fleet for line in daemon.events("cycle.finished"))


@pytest.mark.timeout(60)
def test_replicas_share_the_marquees_and_never_overlap_on_one(
    daemons: DaemonRunner, store: Redis
) -> None:
    fleet = start_fleet(daemons, SHORT_PHASE)
    time.sleep(8.0)  # the length of the experiment, not a wait for something
    assert_clean_stop(daemons, list(fleet.values()), store)

    seen = intervals(read_witness(daemons.witness_dir))
    assert [interval for interval in seen if interval.exit is None] == []
    assert overlapping_pairs(seen) == []
    assert fence_problems(seen) == []
    reconciled = [i for i in seen if i.phase == "second" and i.status == "ok"]
    assert {interval.marquee for interval in reconciled} == set(MARQUEES)
    cycles_by_replica = Counter(interval.replica for interval in reconciled)
    print(f"\ncomplete cycles by replica: {dict(sorted(cycles_by_replica.items()))}")
    assert len(cycles_by_replica) > 1, f"one replica did all the work: {cycles_by_replica}"
    assert set(outcomes(list(fleet.values()))) <= {"ok", "locked", "interrupted"}


@pytest.mark.timeout(60)
def test_killed_replicas_marquee_is_taken_over_after_the_ttl_and_never_shared(
    daemons: DaemonRunner, store: Redis
) -> None:
    fleet = start_fleet(daemons, SHORT_PHASE)
    victim, _ = wait_for(
        lambda: fresh_enter(fleet, daemons.witness_dir, SHORT_PHASE / 2),
        timeout=20,
        what="a replica entering a phase",
    )
    killed_at = victim.send(signal.SIGKILL)
    assert victim.wait(5) == -signal.SIGKILL
    # Aimed at a phase just entered, the kill lands where it lands (that phase, the cycle's
    # next one, another Marquee's): the victim's witness, final now, says which it caught.
    caught = [i for i in intervals(victim.witness(daemons.witness_dir)) if i.exit is None]
    assert caught, "the SIGKILL caught the victim in no phase"
    marquee, fence, entered = caught[0].marquee, caught[0].fence, caught[0].enter
    takeover = wait_for(
        lambda: taken_over(daemons.witness_dir, victim, marquee, entered),
        timeout=TTL + 10,
        what=f"another replica entering {marquee}",
    )[0]
    # Every lease the victim held has lapsed and been taken over or left alone by now.
    time.sleep(max(0.0, killed_at + TTL + 2 * TICK - time.monotonic()))
    survivors = [daemon for daemon in fleet.values() if daemon is not victim]
    assert_clean_stop(daemons, survivors, store)

    seen = intervals(read_witness(daemons.witness_dir))
    open_ones = [interval for interval in seen if interval.exit is None]
    assert {interval.pid for interval in open_ones} == {victim.pid}
    assert set(open_ones) == set(caught)
    assert takeover.fence > fence
    waited = takeover.enter - entered
    print(
        f"\n{marquee}: {victim.replica} entered with fence {fence}, "
        f"SIGKILL {killed_at - entered:.3f} s later;"
    )
    print(f"  {takeover.replica} entered with fence {takeover.fence} after {waited:.3f} s")
    assert waited >= TTL - ENTER_LAG, "taken over before the victim's lease could have lapsed"
    for victims_phase in open_ones:
        # The longest the victim's lease was surely valid, ending at the latest its ttl ran out.
        leased = dataclasses.replace(victims_phase, exit=victims_phase.enter + TTL - ENTER_LAG)
        for other in seen:
            if other.marquee == victims_phase.marquee and other.pid != victim.pid:
                assert leased.overlap(other) == 0, (victims_phase, other)
    complete = [interval for interval in seen if interval.exit is not None]
    assert overlapping_pairs(complete) == []
    assert fence_problems(seen) == []


@pytest.mark.timeout(90)
def test_frozen_replica_starts_nothing_on_its_old_fence_after_waking(
    daemons: DaemonRunner, store: Redis
) -> None:
    phase_seconds, stopped_for = 1.5, 5.0
    fleet = start_fleet(daemons, phase_seconds)
    victim, enter = wait_for(
        lambda: fresh_enter(fleet, daemons.witness_dir, phase_seconds / 3),
        timeout=20,
        what="a replica entering a phase",
    )
    stopped_at = victim.send(signal.SIGSTOP)
    marquee, fence, entered = enter["marquee"], enter["fence"], enter["t"]
    takeover = wait_for(
        lambda: taken_over(daemons.witness_dir, victim, marquee, entered),
        timeout=stopped_for + 10,
        what=f"another replica entering {marquee}",
    )[0]
    time.sleep(max(0.0, stopped_at + stopped_for - time.monotonic()))
    resumed_at = victim.send(signal.SIGCONT)
    [finished] = wait_for(
        lambda: victim.events("cycle.finished", marquee=marquee, fence=fence),
        timeout=10,
        what=f"the woken replica's cycle on {marquee} ending",
    )
    assert_clean_stop(daemons, list(fleet.values()), store)

    seen = intervals(read_witness(daemons.witness_dir))
    assert [interval for interval in seen if interval.exit is None] == []
    frozen = [i for i in seen if i.pid == victim.pid and i.enter < stopped_at < (i.exit or 0)]
    assert (marquee, fence) in {(i.marquee, i.fence) for i in frozen}
    frozen_fences = {(i.marquee, i.fence) for i in frozen}
    stale_starts = [
        i
        for i in seen
        if i.pid == victim.pid and (i.marquee, i.fence) in frozen_fences and i.enter > resumed_at
    ]
    assert stale_starts == [], "the woken replica started a phase on a lapsed lease"
    assert finished["outcome"] in {"lock_lost", "deadline"}, finished
    assert takeover.fence > fence
    assert takeover.enter - entered >= TTL - ENTER_LAG
    # Everything but the phases the freeze caught must still be exclusive, the woken replica's
    # later phases included.
    assert overlapping_pairs([i for i in seen if i not in frozen]) == []
    assert fence_problems([i for i in seen if i not in frozen]) == []

    print(f"\nSIGSTOP of {victim.replica} for {resumed_at - stopped_at:.2f} s (ttl {TTL:g} s):")
    for victims_phase in frozen:
        watched = (victims_phase.marquee, victims_phase.fence) == (marquee, fence)
        _report_overlap(victims_phase, seen, stopped_at, resumed_at, watched)
    print(f"  {victim.replica}'s cycle on {marquee} fence {fence}: {finished['outcome']}")


def _report_overlap(
    victims_phase: Interval, seen: list[Interval], stopped_at: float, resumed_at: float, lead: bool
) -> None:
    """Print, not assert: how long the witness saw the frozen phase and a new holder's together."""
    assert victims_phase.exit is not None
    print(
        f"  {victims_phase.marquee}: {victims_phase.replica} {victims_phase.phase} "
        f"fence {victims_phase.fence} "
        f"[{victims_phase.enter - stopped_at:+.3f}, {victims_phase.exit - stopped_at:+.3f}] s "
        f"from SIGSTOP ({victims_phase.status}); woken {resumed_at - stopped_at:+.3f} s"
    )
    total = 0.0
    for other in seen:
        if other.marquee != victims_phase.marquee or other.pid == victims_phase.pid:
            continue
        overlap = victims_phase.overlap(other)
        if overlap > 0:
            assert other.exit is not None
            total += overlap
            print(
                f"    overlaps {other.replica} {other.phase} fence {other.fence} "
                f"[{other.enter - stopped_at:+.3f}, {other.exit - stopped_at:+.3f}] "
                f"by {overlap:.3f} s"
            )
    print(f"    total overlap {total:.3f} s{'  <- the Marquee watched' if lead else ''}")


@pytest.mark.timeout(90)
def test_frozen_replicas_late_write_is_refused_by_the_host(
    daemons: DaemonRunner, store: Redis, ssh_server: SshServer, tmp_path: Path
) -> None:
    """The frozen replica wakes past its ttl and sends the write it had under way: the host has
    accepted the new holder's fence meanwhile and refuses it, so no stale write lands."""
    phase_seconds, stopped_for = 1.5, 5.0
    daemons.write_inventory(MARQUEES, lambda name: ssh_marquee(ssh_server, name, tmp_path / name))
    fleet = {
        replica: daemons.start(
            replica, phase_seconds=phase_seconds, lock_ttl=TTL, redis_socket_timeout=0.5,
            tick_interval=TICK, max_concurrent_cycles=5, shutdown_grace=GRACE,
            phases=[FENCED_WRITE],
        )
        for replica in REPLICAS
    }  # fmt: skip
    victim, enter = wait_for(
        lambda: fresh_enter(fleet, daemons.witness_dir, phase_seconds / 3),
        timeout=20,
        what="a replica entering a phase",
    )
    stopped_at = victim.send(signal.SIGSTOP)
    marquee, fence = enter["marquee"], enter["fence"]
    wait_for(
        lambda: [
            line
            for line in witness_lines(daemons.witness_dir)
            if (line["event"], line["marquee"]) == ("write", marquee) and line["fence"] > fence
            and line["outcome"] == "accepted"
        ],
        timeout=stopped_for + 10,
        what=f"a newer holder's write landing on {marquee}",
    )  # fmt: skip
    time.sleep(max(0.0, stopped_at + stopped_for - time.monotonic()))
    victim.send(signal.SIGCONT)
    [late] = wait_for(
        lambda: [
            line
            for line in victim.witness(daemons.witness_dir)
            if (line["event"], line["marquee"], line["fence"]) == ("write", marquee, fence)
        ],
        timeout=10,
        what=f"the woken replica's late write on {marquee}",
    )
    [finished] = wait_for(
        lambda: victim.events("cycle.finished", marquee=marquee, fence=fence),
        timeout=10,
        what=f"the woken replica's cycle on {marquee} ending",
    )
    assert_clean_stop(daemons, list(fleet.values()), store)

    assert late["outcome"] == "refused"
    assert late["host_fence"] > fence
    assert finished["outcome"] in {"lock_lost", "deadline"}, finished
    stale = stale_writes(daemons.host_record_dir)
    assert stale == [], "a write landed with a fence below one the host had accepted"
    landed = {(name, f) for name, f, _ in host_records(daemons.host_record_dir)}
    assert (marquee, fence) not in landed
    print(
        f"\nSIGSTOP of {victim.replica} for {stopped_for:g} s (ttl {TTL:g} s): its late write on "
        f"{marquee} with fence {fence} was {late['outcome']} by the host, which held fence "
        f"{late['host_fence']}; stale writes accepted: {len(stale)}"
    )
