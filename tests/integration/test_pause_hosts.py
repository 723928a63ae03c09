"""A pause outlives Redis and every replica: ``pause`` puts it on the host of the paused Marquee
(every launchable Marquee's with ``--all``) before it reports, and ``resume`` puts its lifting
there (``operator.pause``, ``phases.pause_copies``). After a FLUSHALL or a restart of
redis-server without persistence, a fresh process (``playguard cycle``, empty memory) reads the
host's copy in its first cycle of the Marquee, writes the pause back to Redis until its end, and
ends ``paused`` having changed nothing on the host. On the lab's redis-server, sshd and dockerd."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.exceptions import ConnectionError as RedisConnectionError

from playguard_async.coordination.keys import FLEET_PAUSE_KEY, pause_key
from playguard_lab import RedisServer
from tests.support.cli import Playguard
from tests.support.daemon import wait_for
from tests.support.fencing import journal
from tests.support.plan_cycle import converged
from tests.support.world import LabWorld

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

HOUR_MS = 3_600_000


def forget(store: SyncRedis, server: RedisServer, loss: str) -> None:
    """Redis forgets every key: FLUSHALL, or a restart of a server without persistence."""
    if loss == "flushall":
        store.flushall()
        return
    server.kill()
    server.restart()
    wait_for(lambda: _answers(store), timeout=30, what="redis-server back")
    assert store.dbsize() == 0, "a restart without persistence forgets everything"


def _answers(store: SyncRedis) -> bool:
    try:
        return bool(store.ping())
    except RedisConnectionError:
        return False


def acted(playguard: Playguard, *args: str) -> dict[str, Any]:
    done = playguard(*args, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    shown: dict[str, Any] = json.loads(done.stdout)
    assert shown["on_every_host"] is True, shown
    return shown


def fresh_cycle(playguard: Playguard) -> dict[str, Any]:
    """One cycle of edge-1 by a new process: a replica with no memory of any pause."""
    done = playguard("cycle", "edge-1", "--json", timeout=180.0)
    cycle: dict[str, Any] = json.loads(done.stdout)["cycle"]
    return cycle


def state_dir(lab: LabWorld) -> Path:
    return Path(lab.data["marquees"][0]["state_dir"])


@pytest.mark.parametrize("loss", ["flushall", "restart"])
@pytest.mark.parametrize("scope", ["edge-1", "--all"])
def test_a_pause_redis_and_every_replica_forgot_holds_from_the_hosts_copy(
    lab: LabWorld, playguard: Playguard, store: SyncRedis, live_redis_server: RedisServer,
    scope: str, loss: str,
) -> None:  # fmt: skip
    converged(playguard)
    shown = acted(playguard, "pause", scope, "--for", "1h", "--reason", "incident 49")
    assert [(h["marquee"], h["carries"]) for h in shown["hosts"]] == [("edge-1", True)]
    writes = journal(state_dir(lab))
    forget(store, live_redis_server, loss)

    held = [fresh_cycle(playguard) for _ in range(2)]

    assert [c["outcome"] for c in held] == ["paused", "paused"], held
    assert all("incident 49" in c["reason"] for c in held)
    assert [c["actions"] for c in held] == [{}, {}], "no phase changed the host"
    assert journal(state_dir(lab)) == writes, "no write reached the host"
    key = FLEET_PAUSE_KEY if scope == "--all" else pause_key("edge-1")
    assert 0 < store.pttl(key) <= HOUR_MS, "written back until its end, not longer"
    until = json.loads(store.get(key) or b"{}")["until"]
    assert until == shown["pause"]["until"], "the pause taken, not a new one"


@pytest.mark.parametrize("scope", ["edge-1", "--all"])
def test_a_pause_resumed_before_the_flush_does_not_come_back(
    lab: LabWorld, playguard: Playguard, store: SyncRedis, scope: str
) -> None:
    converged(playguard)
    acted(playguard, "pause", scope, "--for", "1h", "--reason", "incident 49")
    lifted = acted(playguard, "resume", scope)
    assert lifted["pause"]["reason"] == "incident 49"
    store.flushall()

    after = fresh_cycle(playguard)

    assert after["outcome"] != "paused", after
    assert store.exists(pause_key("edge-1"), FLEET_PAUSE_KEY) == 0


def test_a_resume_after_the_flush_lifts_the_hosts_copy(
    lab: LabWorld, playguard: Playguard, store: SyncRedis
) -> None:
    """Redis forgot the pause before the operator resumed: ``resume`` finds none there, still
    puts the lift on the host, and a fresh process is not paused by the older copy."""
    converged(playguard)
    acted(playguard, "pause", "edge-1", "--for", "1h", "--reason", "incident 49")
    store.flushall()
    lifted = acted(playguard, "resume", "edge-1")
    assert lifted["pause"] is None, "Redis had none to lift"

    assert fresh_cycle(playguard)["outcome"] != "paused"
    assert store.exists(pause_key("edge-1")) == 0


def test_a_pause_that_ended_is_not_written_back(
    lab: LabWorld, playguard: Playguard, store: SyncRedis
) -> None:
    converged(playguard)
    shown = acted(playguard, "pause", "edge-1", "--for", "2s", "--reason", "short")
    store.flushall()
    wait_for(lambda: time.time() > shown["pause"]["until"], timeout=10, what="the pause's end")

    assert fresh_cycle(playguard)["outcome"] != "paused"
    assert store.exists(pause_key("edge-1")) == 0
