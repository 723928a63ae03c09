"""Three ``playguard run`` replicas on three real Marquees for over a minute of faults.

Replicas are SIGKILLed and restarted, frozen past their ttl with SIGSTOP, and Redis is paused,
restarted empty and FLUSHALLed under them; once more on a Sentinel group whose primary is SIGKILLed
twice, the second time after its replicas were cut off. Every cycle writes to its Marquee
through the fenced funnel (``tests.support.phases:fenced_write``), and each host keeps its own
record of what ran there. Afterwards the hosts are the judges: on each, the fences of the writes
that ran never went down, the guard's journal holds exactly those writes, no lock key is left, and
every Marquee was written by a healthy cycle again once the faults ended.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from playguard_async.coordination.keys import marquee_lock_key
from playguard_lab import RedisServer, SshServer
from playguard_lab.topologies import SentinelGroup
from tests.support.daemon import Daemon, DaemonRunner, witness_lines
from tests.support.fencing import host_records, journal, stale_writes
from tests.support.topologies import heal
from tests.support.world import ssh_marquee

pytestmark = pytest.mark.integration

MARQUEES = ("c1", "c2", "c3")
REPLICAS = ("r1", "r2", "r3")
TTL = 2.0
TICK = 0.5
PHASE_SECONDS = 0.2
GRACE = 5.0
RUN_FOR = 62.0
SENTINEL_RUN_FOR = 38.0
CALM_FOR = 12.0
"""The last seconds of the run have no faults: the fleet must have converged by their end. The
run ends sooner once every Marquee has been written again (``written_again``): what follows the
convergence shows nothing the judge reads."""


class Chaos:
    """The fleet and the faults done to it, on one time line (the monotonic clock)."""

    def __init__(
        self, daemons: DaemonRunner, redis_server: RedisServer, store: Redis, workdir: Path
    ) -> None:
        self.daemons = daemons
        self.redis_server = redis_server
        self.store = store
        self.workdir = workdir
        self.fleet: dict[str, Daemon] = {}
        self.log: list[str] = []
        self.started = time.monotonic()

    def start(self, replica: str) -> None:
        self.fleet[replica] = self.daemons.start(
            replica, phase_seconds=PHASE_SECONDS, lock_ttl=TTL, redis_socket_timeout=0.5,
            redis_connect_timeout=0.5, tick_interval=TICK, max_concurrent_cycles=3,
            shutdown_grace=GRACE, phases=["tests.support.phases:fenced_write"],
        )  # fmt: skip

    def note(self, what: str) -> None:
        self.log.append(f"{time.monotonic() - self.started:5.1f} s  {what}")

    def kill(self, replica: str) -> None:
        self.fleet[replica].send(signal.SIGKILL)
        self.fleet[replica].wait(5)
        self.note(f"SIGKILL {replica}")

    def restart(self, replica: str) -> None:
        self.start(replica)
        self.note(f"restarted {replica}")

    def freeze(self, replica: str) -> None:
        self.fleet[replica].send(signal.SIGSTOP)
        self.note(f"SIGSTOP {replica}")

    def thaw(self, replica: str) -> None:
        self.fleet[replica].send(signal.SIGCONT)
        self.note(f"SIGCONT {replica}")

    def pause_redis(self) -> None:
        self.redis_server.pause()
        self.note("Redis paused")

    def resume_redis(self) -> None:
        self.redis_server.resume()
        self.note("Redis resumed")

    def restart_redis(self) -> None:
        self.redis_server.kill()
        self.redis_server.start()
        self.note("Redis killed and restarted empty")

    def flushall(self) -> None:
        self.store.flushall()
        self.note("FLUSHALL")


def schedule(chaos: Chaos) -> list[tuple[float, Callable[[], None]]]:
    """(seconds from the start, fault): every kind twice or more, all before the calm."""
    return [
        (4.0, lambda: chaos.kill("r1")),
        (6.0, lambda: chaos.restart("r1")),
        (9.0, lambda: chaos.freeze("r2")),
        (9.0 + TTL + 2.5, lambda: chaos.thaw("r2")),
        (17.0, chaos.pause_redis),
        (20.0, chaos.resume_redis),
        (24.0, chaos.restart_redis),
        (29.0, chaos.flushall),
        (33.0, lambda: chaos.freeze("r3")),
        (33.0 + TTL + 3.0, lambda: chaos.thaw("r3")),
        (40.0, lambda: chaos.kill("r2")),
        (41.0, chaos.flushall),
        (42.5, lambda: chaos.restart("r2")),
        (44.0, lambda: chaos.freeze("r1")),
        (44.5, chaos.pause_redis),
        (46.5, chaos.resume_redis),
        (47.0 + TTL, lambda: chaos.thaw("r1")),
    ]


@pytest.mark.timeout(150)
def test_hosts_never_accept_a_stale_write_through_kills_freezes_and_redis_faults(
    daemons: DaemonRunner,
    live_redis_server: RedisServer,
    store: Redis,
    ssh_server: SshServer,
    tmp_path: Path,
) -> None:
    daemons.write_inventory(MARQUEES, lambda name: ssh_marquee(ssh_server, name, tmp_path / name))
    chaos = Chaos(daemons, live_redis_server, store, tmp_path)
    for replica in REPLICAS:
        chaos.start(replica)
    calm_from = run(chaos, schedule(chaos), RUN_FOR)
    judge(chaos, daemons, store, calm_from, tmp_path)


@pytest.mark.timeout(150)
def test_hosts_never_accept_a_stale_write_through_sentinel_failovers(
    sentinel: SentinelGroup, ssh_server: SshServer, tmp_path: Path
) -> None:
    """The fleet on a Sentinel group: a primary SIGKILLed, then one that dies after its replicas
    were cut off, so the promoted one hands out fences the hosts have seen; replicas killed and
    frozen in between."""
    daemons = DaemonRunner(tmp_path / "daemons", sentinel.url)
    daemons.write_inventory(MARQUEES, lambda name: ssh_marquee(ssh_server, name, tmp_path / name))
    # Only replica faults go through Chaos here; the Redis faults are the group's own.
    chaos = Chaos(daemons, sentinel.primary(), sentinel.primary().client(), tmp_path)
    failovers: list[Future[Any]] = []
    try:
        with ThreadPoolExecutor(max_workers=1) as executor:

            def failover() -> None:  # the group is whole again before the next fault
                failovers.append(executor.submit(fail_and_heal, sentinel))
                chaos.note("primary SIGKILLed")

            def cut() -> None:
                failovers.append(executor.submit(sentinel.cut_replicas))
                chaos.note("replicas cut off")

            faults = [
                (3.0, failover),
                (5.0, lambda: chaos.freeze("r2")),
                (5.0 + TTL + 2.5, lambda: chaos.thaw("r2")),
                (11.0, cut),
                (13.0, failover),
                (15.0, lambda: chaos.kill("r1")),
                (17.0, lambda: chaos.restart("r1")),
                (20.0, lambda: chaos.freeze("r3")),
                (20.0 + TTL + 2.5, lambda: chaos.thaw("r3")),
            ]
            for replica in REPLICAS:
                chaos.start(replica)
            calm_from = run(chaos, faults, SENTINEL_RUN_FOR)
            for future in failovers:
                future.result()  # a failover that failed raises here
        with sentinel.primary().client() as store:
            judge(chaos, daemons, store, calm_from, tmp_path)
    finally:
        daemons.kill_all()


def fail_and_heal(sentinel: SentinelGroup) -> None:
    sentinel.fail_primary()
    heal(sentinel)


def run(chaos: Chaos, faults: list[tuple[float, Callable[[], None]]], run_for: float) -> float:
    """Do each fault at its time, then let the fleet run calm to ``run_for`` seconds from the
    start; returns when the calm began (monotonic clock)."""
    assert max(at for at, _ in faults) < run_for - CALM_FOR
    for at, fault in faults:
        time.sleep(max(0.0, chaos.started + at - time.monotonic()))
        fault()
    calm_from = time.monotonic()
    deadline = chaos.started + run_for
    while time.monotonic() < deadline and written_again(chaos.daemons, calm_from) != set(MARQUEES):
        time.sleep(0.2)
    return calm_from


def written_again(daemons: DaemonRunner, calm_from: float) -> set[str]:
    """The Marquees a write was accepted on more than ``TTL`` into the calm, when no lease taken
    before the last fault can still be running."""
    return {
        line["marquee"]
        for line in witness_lines(daemons.witness_dir)
        if line["event"] == "write"
        and line["outcome"] == "accepted"
        and line["t"] > calm_from + TTL
    }


def judge(
    chaos: Chaos, daemons: DaemonRunner, store: Redis, calm_from: float, states: Path
) -> None:
    """The hosts judge the run: fences that never went down, journals holding exactly what ran,
    no lock key left, every Marquee written again by a healthy cycle once the faults ended."""
    statuses = daemons.stop_all(list(chaos.fleet.values()), timeout=GRACE + 5)
    assert statuses == {replica: 0 for replica in REPLICAS}
    assert list(store.scan_iter(match=marquee_lock_key("*"))) == [], "a lock key outlived the fleet"

    ran = host_records(daemons.host_record_dir)
    assert stale_writes(daemons.host_record_dir) == []
    for marquee in MARQUEES:
        fences = [fence for name, fence, _ in ran if name == marquee]
        accepted = [entry.fence for entry in journal(states / f"{marquee}-state")]
        assert fences == sorted(fences), f"{marquee}: fences went down on the host"
        assert accepted == fences, f"{marquee}: the journal and what ran disagree"

    writes = [line for line in witness_lines(daemons.witness_dir) if line["event"] == "write"]
    assert written_again(daemons, calm_from) == set(MARQUEES), (
        "a Marquee was not written again after the faults"
    )

    outcomes = Counter(
        line["outcome"] for daemon in daemons.started for line in daemon.events("cycle.finished")
    )
    failures = Counter(
        f"{line['outcome']}: {line['reason']}"
        for daemon in daemons.started
        for line in daemon.events("cycle.finished")
        if line["outcome"] in ("phase_failed", "error")
    )
    raised = sum(len(daemon.events("fence.raised")) for daemon in daemons.started)
    refused = Counter(line["marquee"] for line in writes if line["outcome"] == "refused")
    print("\n" + "\n".join(chaos.log))
    print(
        f"writes that ran on the hosts: {len(ran)}; refused by the hosts: {sum(refused.values())} "
        f"{dict(refused)}; fence counter lifted: {raised} times; cycle outcomes: {dict(outcomes)}; "
        f"failures: {dict(failures)}"
    )
