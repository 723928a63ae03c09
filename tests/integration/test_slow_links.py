"""Scenario 4 of issue 24: a stalled Redis connection (open, no byte moves) and a link to a host
with 1 s of latency, under real ``playguard run`` processes and the lab's real servers, through
the fault proxy (``tests.support.fault_proxy``).

What must hold: a phase is cut at its lease's deadline whatever the links do; a Redis command
that gets no answer fails on the command channel's own timeout (``redis_socket_timeout``), so no
phase starts without a confirmed lease; a remote command on the slow link fails at its budget;
the daemon stops within its grace while Redis is stalled; and once the link heals the Marquee's
cycles succeed again.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from playguard_lab import RedisServer, SshServer
from tests.support.daemon import DaemonRunner, wait_for, witness_lines
from tests.support.fault_proxy import ThreadedProxy
from tests.support.world import ssh_marquee_through

pytestmark = pytest.mark.integration

SLACK = 1.0
"""Seconds a loaded 2-core machine may add to any bound (process scheduling, log writes)."""


def witnessed(daemons: DaemonRunner, event: str) -> list[dict[str, Any]]:
    return [line for line in witness_lines(daemons.witness_dir) if line["event"] == event]


@pytest.mark.timeout(90)
def test_a_stalled_redis_connection_cuts_at_the_lease_and_fails_each_command_in_time(
    daemons: DaemonRunner, live_redis_server: RedisServer, store: Redis
) -> None:
    ttl, socket_timeout, grace = 4.0, 1.0, 3.0
    daemons.write_inventory(["s1"])
    with ThreadedProxy("127.0.0.1", live_redis_server.port) as proxy:
        daemon = daemons.start(
            "r1", phase_seconds=30.0, lock_ttl=ttl, redis_socket_timeout=socket_timeout,
            redis_connect_timeout=socket_timeout, tick_interval=1.0, shutdown_grace=grace,
            redis_url=f"redis://127.0.0.1:{proxy.port}/0", phases=["tests.support.phases:first"],
            log_level="debug",  # a cycle's redis_unavailable ending is debug while Redis is down
        )  # fmt: skip
        entered = wait_for(lambda: witnessed(daemons, "enter"), timeout=20, what="a phase")[0]
        proxy.stall()

        # The running phase is cut at its lease's deadline: no renewal can reach Redis.
        exits = wait_for(lambda: witnessed(daemons, "exit"), timeout=ttl + 5, what="the cut")
        assert exits[0]["status"] == "cancelled"
        assert exits[0]["t"] <= entered["t"] + ttl + SLACK
        deadline = wait_for(lambda: daemon.events("phase.deadline"), timeout=5, what="deadline")
        assert deadline[0]["headroom"] <= 0.1

        # Each later cycle's acquire fails on the channel's timeout; none starts a phase.
        def unavailable() -> list[dict[str, Any]]:
            return daemon.events("cycle.finished", outcome="redis_unavailable")

        wait_for(lambda: len(unavailable()) >= 3, timeout=15, what="three acquires failed")
        for line in unavailable():
            assert line["duration"] <= socket_timeout + SLACK, line
            # The command's own deadline, or its batch's (a connect, the clock read): a timeout.
            assert line["reason"].startswith("TimeoutError"), line
        assert witnessed(daemons, "enter") == [entered], "a phase started without a lease"

        # Nothing hangs on the stalled connection: SIGTERM ends the daemon within its bounds.
        stopped_at = daemon.send(signal.SIGTERM)
        assert daemon.wait(grace + 2 * socket_timeout + 5) == 0
        assert time.monotonic() - stopped_at <= grace + 2 * socket_timeout + SLACK
        assert proxy.open_connections() >= 1, "the stall kept its connections open"


@pytest.mark.timeout(150)
def test_a_1s_latency_link_to_a_host_fails_each_command_at_its_budget_and_the_phase_at_its_lease(
    daemons: DaemonRunner, ssh_server: SshServer, tmp_path: Path
) -> None:
    """0.5 s each way to the host's sshd: an SSH connect takes about 6 s, a command 2 s (two
    round trips), and no load makes either shorter. A command budget of 1.5 s fails the command
    on time; a lease of 4 s cuts the phase inside the connect; once the link heals, the cycles
    succeed."""
    with ThreadedProxy(ssh_server.host, ssh_server.port) as proxy:
        daemons.write_inventory(
            ["slow"],
            lambda name: ssh_marquee_through(ssh_server, proxy.port, name, tmp_path / name),
        )
        proxy.delay(0.5)
        common: dict[str, Any] = {
            "tick_interval": 2.0, "shutdown_grace": 5.0, "ssh_connect_timeout": 20.0,
            "phases": ["tests.support.phases:remote_probe"],
        }  # fmt: skip

        budget = 1.5
        daemon = daemons.start("r1", lock_ttl=30.0, remote_command_timeout=budget, **common)
        timed_out = wait_for(
            lambda: daemon.events("cycle.finished", outcome="phase_failed"), timeout=60,
            what="a command that ran out of budget",
        )[0]  # fmt: skip
        assert "RemoteCommandTimeout" in timed_out["reason"], timed_out
        assert f"within {budget:g}s" in timed_out["reason"], timed_out
        assert timed_out["duration"] <= 20.0 + budget + 3.0 + SLACK  # connect, budget, kill
        assert daemons.stop_all([daemon], timeout=20) == {"r1": 0}

        ttl = 4.0
        cut = daemons.start("r2", lock_ttl=ttl, remote_command_timeout=ttl / 2, **common)
        deadline = wait_for(
            lambda: cut.events("cycle.finished", outcome="deadline"), timeout=40,
            what="a phase cut at its lease",
        )[0]  # fmt: skip
        assert deadline["duration"] <= ttl + SLACK
        assert cut.events("phase.deadline")[0]["headroom"] >= -SLACK

        proxy.heal()
        wait_for(
            lambda: cut.events("cycle.finished", outcome="ok"), timeout=30,
            what="a cycle that succeeded once the link healed",
        )  # fmt: skip
        assert daemons.stop_all([cut], timeout=20) == {"r2": 0}
