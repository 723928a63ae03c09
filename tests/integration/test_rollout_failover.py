"""A Sentinel failover that takes Redis back to exactly the rollout record a running replica
knows, losing an operator's abort made after it (issue 49): on the lab's Sentinel group (one
primary, two replicas, three sentinels) and six Marquees on the lab's sshd, each with its
fenced state directory and its copies of the decisions (``remote.kept``).

Replica B's cycles are the gate's, run by hand: the rollout desk's verdict and tell on the real
Redis, with B's ``DecisionMemory`` and the hosts' copies (``kept_rollouts``, ``keep_rollouts``);
B's tick reads Redis's identity (``coordination.identity``), as the engine's does. Seen, the
failover makes B's next cycles read the hosts' copies first; unseen (a tick whose identity read
failed), the hosts refuse B's step, which counts the abort's write number, and B learns the
abort there. On the lab's Cluster, the identity is each primary's. And the host's rule alone,
on the lab's sshd: a copy no older than a write stays and is learnt; garbage is written over."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from redis.asyncio import Redis

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.identity import RedisIdentity
from playguard_async.coordination.keys import fence_key, marquee_lock_name, rollout_key
from playguard_async.coordination.lock import TokenLock
from playguard_async.desired_state.model import Inventory
from playguard_async.operator import rollout as operator_rollout
from playguard_async.operator.rollout_hosts import put_on_host
from playguard_async.phases.decision_copies import (
    DecisionMemory,
    keep_rollouts,
    kept_rollouts,
    rollout_copy,
)
from playguard_async.phases.rollout_desk import RolloutDesk, Standing
from playguard_async.phases.rollout_record import Rollout
from playguard_async.remote.ssh import open_session
from playguard_lab import SshServer
from playguard_lab.topologies import ClusterLab, SentinelGroup
from tests.integration.test_rollout_desk import HEAD, NAMES, NEW, OLD, key_of, verdict
from tests.support.engine import settings_for
from tests.support.fencing import host_fence
from tests.support.topologies import client_for
from tests.support.world import LAB_OPTIONS, ssh_marquee

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SCOPE = "web@main"
BAKE = 1.0
"""Seconds the canary bakes: B's first cycles after it start wave 2 unless they know better."""


class Replica:
    """Replica B: its memory of the decisions, its view of Redis's identity, and where each
    Marquee runs after B's cycles of it (its release: OLD, or NEW once admitted)."""

    def __init__(self, redis: RedisClient, world: Inventory, state: Path) -> None:
        self.redis, self.world, self.state = redis, world, state
        self.memory = DecisionMemory()
        self.identity = RedisIdentity(redis, 2.0, [self.memory.forget_hosts])
        self.runs = dict.fromkeys(NAMES, OLD)

    async def tick(self) -> None:
        for name in NAMES:
            await self.cycle(name)

    async def cycle(self, name: str) -> None:
        """One cycle's gate of ``name``, as ``rollout_gate`` and ``tell_rollout`` run it; the
        Playground comes out healthy."""
        marquee = self.world.marquee(name)
        playground = self.world.playgrounds_on(name)[0]
        policy = self.world.playspec_of(playground).rollout
        assert policy is not None
        lease = await TokenLock(self.redis, marquee_lock_name(name), ttl=30.0).acquire()
        assert lease is not None
        try:
            async with open_session(marquee, LAB_OPTIONS, lease=lease) as session:
                desk = RolloutDesk(self.redis, 2.0, self.world, marquee, dry_run=False)
                recorded = await desk.recorded([SCOPE])
                kept = await kept_rollouts(session, {playground.name: SCOPE}, recorded,
                                           self.memory)  # fmt: skip
                at = self.runs[name]
                standing = Standing(has_good=True, good_release=at, has_previous=at != OLD,
                                    previous_release=OLD if at != OLD else None,
                                    rolls_back=True, kept=kept.get(SCOPE))  # fmt: skip
                seen = await desk.verdict(playground, policy, NEW, HEAD, standing)
                if seen.rollout is not None:
                    await keep_rollouts(session, {playground.name: seen.rollout}, self.memory)
                if seen.admitted and seen.rollout is not None:
                    self.runs[name] = NEW
                    told = await desk.tell(seen, True, "healthy")
                    if told is not None:
                        await keep_rollouts(session, {playground.name: told.rollout}, self.memory)
                elif seen.back or seen.stop or (at == NEW and NEW in seen.aborted):
                    self.runs[name] = OLD
        finally:
            await lease.release()

    async def record(self) -> Rollout:
        raw = await self.redis.get(rollout_key(SCOPE))
        assert raw is not None
        found = Rollout.parse(SCOPE, raw)
        assert found is not None
        return found

    def copies(self) -> dict[str, str]:
        """Marquee -> the status its host's copy of the scope's record says."""
        said: dict[str, str] = {}
        for name in NAMES:
            path = self.state / f"{name}-state" / "kept" / rollout_copy(f"web-{name}")
            copy = Rollout.parse(SCOPE, path.read_text(encoding="utf-8").splitlines()[0])
            assert copy is not None, name
            said[name] = copy.status
        return said

    async def fences_caught_up(self) -> None:
        """Redis's fence counters lifted to what each host accepted (the promoted replica's
        stood lower), as the engine's ``catch_up_fence`` does after the first refusal."""
        for name in NAMES:
            held = host_fence(self.state / f"{name}-state")
            await self.redis.set(fence_key(marquee_lock_name(name)), held or 0)


def world_on(ssh: SshServer, state: Path) -> Inventory:
    return Inventory.model_validate({
        "marquees": [ssh_marquee(ssh, name, state / name) for name in NAMES],
        "playspecs": [{"name": "web", "repo": "https://git.example/web.git",
                       "rollout": {"waves": [1, "50%", "100%"], "bake": BAKE,
                                   "max_failures": 1, "wave_timeout": 900}}],
        "playgrounds": [{"name": f"web-{name}", "playspec": "web", "marquee": name,
                         "branch": "main"} for name in NAMES],
    })  # fmt: skip


async def abort_on_every_host(b: Replica, url: str, rollout_id: str) -> Rollout:
    """``rollout abort`` as ``rollout_hosts.act_on_hosts`` runs it: stored, then on each host."""
    settings = settings_for(redis_url=url, redis_socket_timeout=2.0)
    changed = await operator_rollout.act(settings, SCOPE, rollout_id, "abort", "bad release")
    for name in NAMES:
        lease = await TokenLock(b.redis, marquee_lock_name(name), ttl=30.0).acquire()
        assert lease is not None
        try:
            async with open_session(b.world.marquee(name), LAB_OPTIONS, lease=lease) as session:
                await put_on_host(session, [f"web-{name}"], changed)
        finally:
            await lease.release()
    return changed


@pytest.mark.parametrize("seen", [True, False], ids=["failover seen", "failover unseen"])
async def test_a_failover_back_to_a_record_a_replica_knows_loses_no_abort(
    sentinel: SentinelGroup, ssh_server: SshServer, tmp_path: Path, seen: bool
) -> None:
    redis = client_for(sentinel.url, timeout=2.0)
    b = Replica(redis, world_on(ssh_server, tmp_path), tmp_path)
    try:
        await redis.flushall()
        assert not await b.identity.changed(), "the first read only records"
        await b.tick()  # opens the rollout; the canary verified, baking
        knew = await b.record()
        [canary] = [name for name in NAMES if knew.wave_of(key_of(name)) == 0]
        assert (knew.status, knew.wave, b.runs[canary]) == ("running", 0, NEW)
        await redis.execute_command("WAIT", 2, 5000)  # both replicas hold what B knows
        sentinel.cut_replicas()
        aborted = await abort_on_every_host(b, sentinel.url, knew.id)
        assert (aborted.status, aborted.seq) == ("aborted", knew.seq + 1)
        await asyncio.to_thread(sentinel.fail_primary)
        assert await b.record() == knew, "the failover lost the abort"
        await b.fences_caught_up()
        if seen:
            assert await b.identity.changed() is True
        await asyncio.sleep(BAKE)  # the canary's bake passes
        await b.tick()
        if not seen:
            await b.tick()
        after = await b.record()
    finally:
        await redis.aclose()

    assert after.status == "aborted"
    assert NEW in after.aborted
    if seen:
        assert after.wave == 0, "no wave started"
    assert set(b.runs.values()) == {OLD}, b.runs
    assert set(b.copies().values()) == {"aborted"}


async def test_a_clusters_identity_is_each_primarys_and_holds_while_nothing_changes(
    cluster: ClusterLab,
) -> None:
    """On the lab's Cluster the identity is read from each of its three primaries (one INFO
    each) and is the same at the next tick: no change is told while nothing failed over."""
    redis = client_for(cluster.url, timeout=2.0)
    told: list[None] = []
    identity = RedisIdentity(redis, 2.0, [lambda: told.append(None)])
    try:
        first = await identity.read()
        assert not await identity.changed()
        assert not await identity.changed()
    finally:
        await redis.aclose()
    assert len(first) == 3
    assert len({run for run, _ in first}) == 3
    assert identity.known == first
    assert told == []


GARBAGE = ['{"seq":99,broken', "not json at all", '{"seq":' + "9" * 30 + "}", "x" * 70_000]
"""Host copies a replica cannot read: not JSON (one with a count the host reads), a count past
what either reads, too large: each is written over, never blocks the copy."""


async def test_a_host_keeps_a_copy_no_older_than_a_write_and_garbage_never_blocks_one(
    redis: Redis, ssh_server: SshServer, tmp_path: Path
) -> None:
    world = world_on(ssh_server, tmp_path)
    [name, *_] = NAMES
    opened = (await verdict(redis, world, name)).rollout
    assert opened is not None
    copy = tmp_path / f"{name}-state" / "kept" / rollout_copy(f"web-{name}")
    aborted = replace(opened, seq=opened.seq + 1, status="aborted", why="bad release")
    stepped = replace(opened, seq=opened.seq + 1, wave=1)

    async def kept_after(
        there: str | None, written: Rollout, memory: DecisionMemory
    ) -> tuple[str, Rollout]:
        if there is not None:
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(there + "\n", encoding="utf-8")
        lease = await TokenLock(redis, marquee_lock_name(name), ttl=30.0).acquire()
        assert lease is not None
        try:
            async with open_session(world.marquee(name), LAB_OPTIONS, lease=lease) as session:
                await keep_rollouts(session, {f"web-{name}": written}, memory)
        finally:
            await lease.release()
        return copy.read_text(encoding="utf-8").splitlines()[0], memory.rollouts[SCOPE]

    fresh = DecisionMemory()
    assert await kept_after(None, aborted, fresh) == (aborted.encode(), aborted)
    behind = DecisionMemory()  # knows the record before the abort, not the abort
    behind.saw_rollout(opened)
    there, learnt = await kept_after(None, stepped, behind)
    assert there == aborted.encode(), "the host left its abort of the same count"
    assert learnt.status == "aborted", "and the replica learnt it"
    for garbage in GARBAGE:
        assert (await kept_after(garbage, stepped, DecisionMemory()))[0] == stepped.encode()
