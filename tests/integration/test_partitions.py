"""Network faults for real (issue 24): a daemon in a network namespace of its own, whose packets to
Redis are dropped by iptables (no RST, no ICMP: every socket waits for its own timeout), then let
through again, so TCP delivers what it held back (``tests.support.netns``)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from redis import Redis as SyncRedis

from playguard_async.coordination.keys import marquee_lock_key
from playguard_lab import RedisServer, SshServer
from tests.support.daemon import (
    Daemon,
    DaemonRunner,
    Interval,
    intervals,
    wait_for,
    witness_lines,
)
from tests.support.fencing import host_records, journal, stale_writes
from tests.support.netns import Namespace
from tests.support.postgres import LabDatabase, migrated_fleet
from tests.support.probes import http_get
from tests.support.redis_monitor import monitoring
from tests.support.world import ssh_marquee

pytestmark = pytest.mark.integration

NetnsFactory = Callable[[Sequence[int]], Namespace]

TICK = 1.0
REDIS_TIMEOUT = 0.5
# Longer than the acquire's timeout and the kernel's first retransmissions (0.2, 0.6, 1.4, 3.0 s
# after the send), so the acquire that went out just after the hole opened reaches Redis only at
# the next one, 6.2 s after it was sent: 2-3 s after the lift, long after the client gave up.
HOLE = 4.0
LATE_DELIVERY_WITHIN = 15.0
HTTP_PORT = 8081
"""The daemons' endpoints, on their namespace's own address: any port is free there."""
# Between Redis answering a lease's acquire or renewal and the witness stamping the phase's
# enter, on a loaded two-core machine (as in test_safety).
ENTER_LAG = 0.25


def finished(daemon: Daemon, outcome: str = "ok") -> int:
    return len(daemon.events("cycle.finished", outcome=outcome))


def test_acquire_delivered_late_after_a_black_hole_takes_no_lock(
    daemons: DaemonRunner,
    netns: NetnsFactory,
    live_redis_server: RedisServer,
    store: SyncRedis,
    tmp_path: Path,
) -> None:
    port = live_redis_server.port
    namespace = netns([port])
    daemons.write_inventory(["m1"])
    with monitoring(live_redis_server, tmp_path / "monitor.log") as monitor:
        # The fleet's pause is read once at start and then not for an hour: its read would be
        # the first command of a tick's batch, and this test is about the acquire being caught.
        daemon = daemons.start(
            "r1", wrapper=namespace.exec_prefix, phase_seconds=0.05, tick_interval=TICK,
            lock_ttl=30.0, redis_socket_timeout=REDIS_TIMEOUT, redis_connect_timeout=REDIS_TIMEOUT,
            fleet_pause_read_interval=3600.0,
        )  # fmt: skip
        wait_for(lambda: finished(daemon), timeout=30, what="a first cycle")
        done = finished(daemon)
        # Just after a cycle's ending: the next command on the lock's connection is the next
        # tick's acquire, which the hole catches in flight.
        wait_for(lambda: finished(daemon) > done, timeout=5, what="a cycle's ending")
        namespace.black_hole(port)
        time.sleep(HOLE)
        namespace.lift(port)
        locked_before = len(daemon.events("marquee.locked"))
        wait_for(
            lambda: monitor.late_acquires() or len(daemon.events("marquee.locked")) > locked_before,
            timeout=LATE_DELIVERY_WITHIN, what="the held-back acquire reaching Redis",
        )  # fmt: skip
        late = monitor.late_acquires()
        after_late = finished(daemon)
        time.sleep(2.5 * TICK)
        assert len(daemon.events("marquee.locked")) == locked_before, (
            "a lock no lease holds: the late acquire took it"
        )
        assert finished(daemon) > after_late, "cycled at the next tick after the late delivery"
    assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}
    assert store.exists(marquee_lock_key("m1")) == 0, "no lock left behind"
    assert late, "the fault under test: Redis ran an acquire past its not-after"
    assert daemon.events("lock.acquire_undone"), "the client gave up and undid its acquire"


def two_replicas_cut_apart(
    daemons: DaemonRunner, netns: NetnsFactory, redis_port: int, *, serving: bool = False,
    **settings: Any,
) -> dict[str, tuple[Daemon, Namespace]]:  # fmt: skip
    """r1 and r2, each in a namespace of its own wired to Redis (so each can be cut alone), on
    the short tick and Redis timeouts of this module; ``serving``: their HTTP endpoints on their
    namespace's address."""
    fleet = {}
    for replica in ("r1", "r2"):
        namespace = netns([redis_port])
        if serving:  # beyond loopback: the web view there would need a credential
            settings |= {"http_address": f"{namespace.inside}:{HTTP_PORT}", "web_view": False}
        daemon = daemons.start(
            replica, wrapper=namespace.exec_prefix, tick_interval=TICK,
            redis_socket_timeout=REDIS_TIMEOUT, redis_connect_timeout=REDIS_TIMEOUT, **settings,
        )  # fmt: skip
        fleet[replica] = daemon, namespace
    return fleet


def readiness(namespace: Namespace) -> int:
    return http_get(f"http://{namespace.inside}:{HTTP_PORT}/readyz", timeout=2.0)[0]


def phases_seen(daemons: DaemonRunner) -> list[Interval]:
    lines = witness_lines(daemons.witness_dir)
    return intervals([line for line in lines if line["event"] in {"enter", "exit"}])


def unready(namespace: Namespace) -> bool:
    return readiness(namespace) == 503


def converged_since(
    daemons: DaemonRunner, marquees: Sequence[str], since: float, last_phase: str = "second"
) -> float | None:
    """When the last of ``marquees`` finished a whole cycle (its ``last_phase`` ``ok``) begun
    after ``since``, or None while one has not."""
    done: dict[str, float] = {}
    for interval in phases_seen(daemons):
        if interval.phase == last_phase and interval.status == "ok" and interval.enter > since:
            assert interval.exit is not None
            done.setdefault(interval.marquee, interval.exit)
    return max(done.values()) if set(done) == set(marquees) else None


@pytest.mark.timeout(120)
def test_redis_black_holed_for_every_replica_then_back(
    daemons: DaemonRunner, netns: NetnsFactory, live_redis_server: RedisServer, store: SyncRedis
) -> None:
    """Issue 24, scenario 3: 30 s without Redis for both replicas. No phase starts without a
    lease Redis confirmed, /readyz says so, and within two ticks of the lift every Marquee has
    had a whole cycle again, with no lock left behind."""
    port, hole = live_redis_server.port, 30.0
    marquees = ("m1", "m2", "m3", "m4")
    daemons.write_inventory(marquees)
    fleet = two_replicas_cut_apart(
        daemons, netns, port, serving=True, phase_seconds=0.2, lock_ttl=10.0
    )
    started = time.monotonic()
    wait_for(lambda: converged_since(daemons, marquees, started), timeout=30, what="a first round")
    assert all(readiness(namespace) == 200 for _, namespace in fleet.values())
    for _, namespace in fleet.values():
        namespace.black_hole(port)
    cut = time.monotonic()
    for replica, (_, namespace) in fleet.items():
        wait_for(functools.partial(unready, namespace), timeout=5, what=f"{replica} unready")
    time.sleep(max(0.0, cut + hole - time.monotonic()))
    # Stamped before the first lift: a replica lifted first may begin a phase while the other is
    # still being lifted, with a lease Redis confirmed.
    lifted = time.monotonic()
    for _, namespace in fleet.values():
        namespace.lift(port)
    converged = wait_for(
        lambda: converged_since(daemons, marquees, lifted), timeout=2 * TICK + 3,
        what="every Marquee cycled after the lift",
    )  # fmt: skip
    assert all(readiness(namespace) == 200 for _, namespace in fleet.values())
    seen = phases_seen(daemons)
    daemon_list = [daemon for daemon, _ in fleet.values()]
    assert daemons.stop_all(daemon_list, timeout=10) == {"r1": 0, "r2": 0}

    in_the_dark = [i for i in seen if cut + ENTER_LAG < i.enter < lifted]
    assert in_the_dark == [], "a phase began without a lease Redis confirmed"
    assert converged - lifted <= 2 * TICK + 1.0, f"converged {converged - lifted:.2f} s after"
    assert list(store.scan_iter(match=marquee_lock_key("*"))) == [], "no lock left behind"
    for daemon in daemon_list:
        assert daemon.events("redis.down"), f"{daemon.replica} told the outage"
        assert daemon.events("redis.back"), f"{daemon.replica} told its end"
    print(f"\nevery Marquee converged {converged - lifted:.2f} s after a {hole:g} s black hole")


def witnessed(daemons: DaemonRunner, event: str, **fields: object) -> list[dict[str, Any]]:
    return [
        line
        for line in witness_lines(daemons.witness_dir)
        if line["event"] == event and all(line.get(key) == value for key, value in fields.items())
    ]


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("write_after", "late"),
    [(1.0, False), (6.0, True)],
    ids=["write-within-the-lease", "write-after-the-takeover"],
)
def test_replica_cut_from_redis_mid_phase_but_not_from_its_host(
    daemons: DaemonRunner,
    netns: NetnsFactory,
    live_redis_server: RedisServer,
    ssh_server: SshServer,
    store: SyncRedis,
    tmp_path: Path,
    write_after: float,
    late: bool,
) -> None:
    """Issue 24, scenario 1: r1 loses Redis (black hole) in the middle of a phase whose write
    goes out ``write_after`` seconds in, over a link to the host that still works. Within the
    lease the write lands, the renewal after it times out within ``redis_socket_timeout`` and no
    further phase runs; past the lease (the write was on its way, as a frozen replica's would
    be) the host refuses it, having accepted r2's newer fence. No stale write is accepted."""
    ttl = 3.0
    redis_port = live_redis_server.port
    daemons.write_inventory(["m1"], lambda name: ssh_marquee(ssh_server, name, tmp_path / name))
    options: dict[str, Any] = {
        "lock_ttl": ttl, "tick_interval": 0.5, "redis_socket_timeout": REDIS_TIMEOUT,
        "redis_connect_timeout": REDIS_TIMEOUT,
        "phases": ["tests.support.phases:fenced_write", "tests.support.phases:first"],
    }  # fmt: skip
    namespace = netns([redis_port, ssh_server.port])
    cut_off = daemons.start(
        "r1", wrapper=namespace.exec_prefix, phase_seconds=write_after, **options
    )
    [enter] = wait_for(
        lambda: witnessed(daemons, "enter", pid=cut_off.pid, phase="write")[:1],
        timeout=30, what="r1 entering its write phase",
    )  # fmt: skip
    namespace.black_hole(redis_port)
    cut = time.monotonic()
    fence = enter["fence"]
    other = daemons.start("r2", phase_seconds=0.3, **options)
    [taken_over] = wait_for(
        lambda: witnessed(daemons, "write", pid=other.pid, outcome="accepted")[:1],
        timeout=20, what="r2's write accepted by the host",
    )  # fmt: skip
    [finished] = wait_for(
        lambda: cut_off.events("cycle.finished", fence=fence),
        timeout=write_after + 10, what="r1's cycle ending",
    )  # fmt: skip
    [written] = witnessed(daemons, "write", pid=cut_off.pid, fence=fence)
    assert daemons.stop_all([other], timeout=10) == {"r2": 0}

    assert taken_over["fence"] > fence
    assert stale_writes(daemons.host_record_dir) == [], "a write below an accepted fence landed"
    landed = {(marquee, f) for marquee, f, _ in host_records(daemons.host_record_dir)}
    further = witnessed(daemons, "enter", pid=cut_off.pid, phase="first", fence=fence)
    assert further == [], "r1 ran a phase after it lost Redis"
    if late:
        assert written["outcome"] == "refused"
        assert written["host_fence"] >= taken_over["fence"]
        assert ("m1", fence) not in landed
        assert finished["outcome"] in {"deadline", "lock_lost"}, finished
        return
    assert written["outcome"] == "accepted", "within its lease, r1's write lands"
    assert ("m1", fence) in landed
    assert finished["outcome"] == "lock_lost", finished
    [lost] = cut_off.events("lock.lost", fence=fence)
    assert lost["reason"] == "unreachable"
    [write_exit] = witnessed(daemons, "exit", pid=cut_off.pid, phase="write", fence=fence)
    lost_at = wall_to_monotonic(lost["timestamp"])
    assert lost_at - write_exit["t"] <= REDIS_TIMEOUT + 0.5, "the renewal waited past its bound"
    assert cut < write_exit["t"]


def wall_to_monotonic(timestamp: str) -> float:
    """A log line's ISO time on the monotonic clock the witness stamps with."""
    wall = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    return wall - time.time() + time.monotonic()


@pytest.mark.timeout(90)
def test_replica_cut_from_its_host_mid_write_ends_the_cycle_within_the_command_budget(
    daemons: DaemonRunner,
    netns: NetnsFactory,
    live_redis_server: RedisServer,
    ssh_server: SshServer,
    store: SyncRedis,
    tmp_path: Path,
) -> None:
    """Issue 24, scenario 2: the host's sshd is black-holed while r1's write is under way. No
    socket waits for TCP's own minutes: the cycle ends within the command budget, the lease is
    released (the next tick takes the lock again at once, not after the ttl), the host's guard
    lock is free again, and once the link is back the Marquee converges."""
    budget, ttl, write_seconds = 2.0, 10.0, 1.5
    daemons.write_inventory(["m1"], lambda name: ssh_marquee(ssh_server, name, tmp_path / name))
    namespace = netns([live_redis_server.port, ssh_server.port])
    daemon = daemons.start(
        "r1", wrapper=namespace.exec_prefix, phase_seconds=0.3, tick_interval=TICK,
        lock_ttl=ttl, redis_socket_timeout=REDIS_TIMEOUT, remote_command_timeout=budget,
        ssh_connect_timeout=budget, env={"PLAYGUARD_TEST_WRITE_SECONDS": str(write_seconds)},
        phases=["tests.support.phases:fenced_write", "tests.support.phases:first"],
    )  # fmt: skip
    wait_for(lambda: finished(daemon), timeout=30, what="a first whole cycle")
    sent = len(daemon.events("remote.change"))
    [change] = wait_for(
        lambda: daemon.events("remote.change")[sent:], timeout=10, what="r1 sending a write"
    )
    fence = change["fence"]
    # The write is on the host, holding its guard's lock for ``write_seconds``, when the cut
    # comes: the guard journals a write just before it runs it, under that lock.
    wait_for(
        lambda: [entry for entry in journal(tmp_path / "m1-state") if entry.fence == fence],
        timeout=10, what="r1's write running on the host",
    )  # fmt: skip
    namespace.black_hole(ssh_server.port)
    cut = time.monotonic()
    [ended] = wait_for(
        lambda: daemon.events("cycle.finished", fence=fence),
        timeout=ttl, what="r1's cut cycle ending",
    )  # fmt: skip
    ended_at = wall_to_monotonic(ended["timestamp"])
    [again] = wait_for(
        lambda: [line for line in daemon.events("cycle.finished") if line["fence"] > fence][:1],
        timeout=3 * TICK + budget * 2, what="the next tick's cycle under a new lease",
    )  # fmt: skip
    namespace.lift(ssh_server.port)
    lifted = time.monotonic()
    converged = wait_for(
        lambda: converged_since(daemons, ["m1"], lifted, "first"),
        timeout=2 * TICK + budget + 3, what="m1 converged after the lift",
    )  # fmt: skip
    assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}

    assert ended["outcome"] == "phase_failed", ended
    assert "RemoteCommandTimeout" in ended["reason"], ended
    # The command's budget, then the session's bounded wait (3 s, ``remote.ssh``) for the kill
    # of the abandoned command to reach the host, which it cannot through the hole.
    assert ended_at - cut <= budget + 3.0 + 0.5, f"the cut cycle took {ended_at - cut:.2f} s"
    assert wall_to_monotonic(again["timestamp"]) - ended_at < ttl, "released, not left to lapse"
    assert stale_writes(daemons.host_record_dir) == []
    assert witnessed(daemons, "write", outcome="accepted")[-1]["fence"] > fence
    assert list(store.scan_iter(match=marquee_lock_key("*"))) == [], "no lock left behind"
    print(
        f"\ncut from its host mid-write: cycle ended {ended['outcome']} {ended_at - cut:.2f} s "
        f"after the cut (budget {budget:g} s); converged {converged - lifted:.2f} s after the lift"
    )


def attempted_since(daemon: Daemon, since: float) -> dict[str, float]:
    """Marquee -> when ``daemon`` first attempted it after ``since`` (wall clock): a cycle that
    ran, or found the Marquee locked."""
    attempts: dict[str, float] = {}
    for line in daemon.events():
        if line.get("event") not in {"cycle.finished", "marquee.locked"} or "marquee" not in line:
            continue
        at = datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()
        if at > since:
            attempts.setdefault(line["marquee"], at)
    return attempts


def attempted_all(daemon: Daemon, after: float, marquees: Sequence[str]) -> float:
    """When ``daemon`` had attempted every one of ``marquees`` after ``after`` (wall clock): the
    last of their first attempts; AssertionError if that takes more than two ticks and a margin."""

    def probe() -> float | None:
        attempts = attempted_since(daemon, after)
        return max(attempts.values()) if set(attempts) >= set(marquees) else None

    return wait_for(probe, timeout=2 * TICK + 3, what=f"{daemon.replica} attempting every Marquee")


@pytest.mark.timeout(90)
def test_asymmetric_partition_every_marquee_attempted_by_a_live_replica_within_two_ticks(
    daemons: DaemonRunner, netns: NetnsFactory, live_redis_server: RedisServer
) -> None:
    """Issue 24, scenario 6: r1 sees Redis and r2 does not, then the reverse. Whoever is cut
    drops out of the fleet split, and the other attempts every Marquee within two ticks."""
    port = live_redis_server.port
    marquees = [f"m{index}" for index in range(1, 7)]
    daemons.write_inventory(marquees)
    fleet = two_replicas_cut_apart(daemons, netns, port, phase_seconds=0.1, lock_ttl=3.0)
    started = time.time()
    for daemon, _ in fleet.values():
        first = functools.partial(attempted_since, daemon, started)
        wait_for(first, timeout=30, what=f"{daemon.replica}'s first cycle")
    (r1, r1_link), (r2, r2_link) = fleet["r1"], fleet["r2"]
    time.sleep(2 * TICK)  # both in the split, each on its share

    r2_link.black_hole(port)
    first_cut = time.time()
    taken = attempted_all(r1, first_cut, marquees)
    r1_link.black_hole(port)
    r2_link.lift(port)
    swapped = time.time()
    taken_back = attempted_all(r2, swapped, marquees)
    r1_link.lift(port)
    assert daemons.stop_all([r1, r2], timeout=10) == {"r1": 0, "r2": 0}

    # Two ticks, and the second tick's cycle (its attempt is logged when it ends).
    assert taken - first_cut <= 2 * TICK + 1.0
    assert taken_back - swapped <= 2 * TICK + 1.0
    print(
        f"\nr2 cut: r1 attempted all {len(marquees)} in {taken - first_cut:.2f} s; "
        f"then r1 cut: r2 in {taken_back - swapped:.2f} s (tick {TICK:g} s)"
    )


def since(daemon: Daemon, event: str, after: float, **fields: object) -> list[dict[str, Any]]:
    """``daemon``'s ``event`` lines logged after ``after`` (monotonic clock)."""
    return [
        line
        for line in daemon.events(event, **fields)
        if wall_to_monotonic(line["timestamp"]) > after
    ]


@pytest.mark.timeout(90)
async def test_postgres_black_holed_last_snapshot_in_force_listener_noticed_full_tick_on_return(
    daemons: DaemonRunner,
    netns: NetnsFactory,
    live_redis_server: RedisServer,
    postgres: LabDatabase,
) -> None:
    """Issue 24, scenario 5: PostgreSQL black-holed under a running daemon. The last snapshot
    stays in force (cycles go on), the LISTEN connection is noticed dead by its probe within
    ``desired_state_probe_interval`` + ``desired_state_timeout`` (not TCP's two hours), and once
    the link is back the listener returns and a full tick runs."""
    connection = await migrated_fleet(postgres, daemons.write_inventory(["alpha", "beta"]))
    await connection.close()
    daemons.inventory.unlink()  # the database is the only desired state
    probe, timeout, hole = 1.0, 1.0, 6.0
    pg_port = postgres.server.port
    namespace = netns([live_redis_server.port, pg_port])
    daemon = daemons.start(
        "r1", wrapper=namespace.exec_prefix, phase_seconds=0.05, tick_interval=TICK,
        redis_socket_timeout=REDIS_TIMEOUT, desired_state=postgres.url,
        desired_state_timeout=timeout, desired_state_probe_interval=probe,
        env={"PLAYGUARD_DESIRED_STATE_PASSWORD": postgres.password},
    )  # fmt: skip
    await asyncio.to_thread(
        wait_for, lambda: daemon.events("desired_state.listening"), timeout=30, what="listening"
    )
    # The listener may connect before the first snapshot is read: cut only once one is in force.
    await asyncio.to_thread(
        wait_for, lambda: {line["marquee"] for line in daemon.events("cycle.finished")}
        >= {"alpha", "beta"}, timeout=30, what="a snapshot in force (both Marquees cycled)",
    )  # fmt: skip
    namespace.black_hole(pg_port)
    cut = time.monotonic()
    [lost] = await asyncio.to_thread(
        wait_for, lambda: since(daemon, "desired_state.listener_lost", cut),
        timeout=probe + timeout + 3, what="the listener noticing the dead link",
    )  # fmt: skip
    await asyncio.sleep(max(0.0, cut + hole - time.monotonic()))
    in_the_hole = {line["marquee"] for line in since(daemon, "cycle.finished", cut, outcome="ok")}
    namespace.lift(pg_port)
    lifted = time.monotonic()
    [back] = await asyncio.to_thread(
        wait_for, lambda: since(daemon, "desired_state.listening", lifted),
        timeout=15, what="the listener back",
    )  # fmt: skip
    back_at = wall_to_monotonic(back["timestamp"])
    await asyncio.to_thread(
        wait_for, lambda: {line["marquee"] for line in since(daemon, "cycle.finished", back_at)}
        >= {"alpha", "beta"}, timeout=2 * TICK + 2, what="a full tick after the return",
    )  # fmt: skip
    assert daemons.stop_all([daemon], timeout=15) == {"r1": 0}

    assert wall_to_monotonic(lost["timestamp"]) - cut <= probe + timeout + 1.0
    assert in_the_hole == {"alpha", "beta"}, "the last snapshot stays in force"
    assert since(daemon, "desired_state.unreachable", cut), "the outage was told"
    assert postgres.password not in daemon.stderr()
