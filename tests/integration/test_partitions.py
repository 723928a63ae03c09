"""Network faults for real (issue 24): a daemon in a network namespace of its own, whose packets to
Redis are dropped by iptables (no RST, no ICMP: every socket waits for its own timeout), then let
through again, so TCP delivers what it held back (``tests.support.netns``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from redis import Redis as SyncRedis

from playguard_async.keys import marquee_lock_key
from playguard_async.lab import RedisServer
from tests.support.daemon import Daemon, DaemonRunner, wait_for
from tests.support.netns import Namespace
from tests.support.redis_monitor import monitoring

pytestmark = pytest.mark.integration

NetnsFactory = Callable[[Sequence[int]], Namespace]

TICK = 1.0
REDIS_TIMEOUT = 0.5
# Longer than the acquire's timeout and the kernel's first retransmissions (0.2, 0.6, 1.4, 3.0 s
# after the send), so the acquire that went out just after the hole opened reaches Redis only at
# the next one, 6.2 s after it was sent: 2-3 s after the lift, long after the client gave up.
HOLE = 4.0
LATE_DELIVERY_WITHIN = 15.0


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
        daemon = daemons.start(
            "r1", wrapper=namespace.exec_prefix, phase_seconds=0.05, tick_interval=TICK,
            lock_ttl=30.0, redis_socket_timeout=REDIS_TIMEOUT, redis_connect_timeout=REDIS_TIMEOUT,
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
