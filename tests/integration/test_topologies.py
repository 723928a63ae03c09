"""Redis beyond one server, on real nodes: TLS, replica acknowledgement (``lock_min_replicas``),
a Sentinel failover during a cycle and one that loses fences, a Cluster resharding mid-run, the
topology ``check`` reports, cycle records on each topology."""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

from playguard_async.coordination.address import parse_redis_url
from playguard_async.coordination.client import RedisClient, connect_redis
from playguard_async.coordination.keys import (
    fence_key,
    lock_key,
    marquee_lock_key,
    marquee_lock_name,
)
from playguard_async.coordination.lock import LockLost, LockUnavailable, ReleaseResult, TokenLock
from playguard_async.coordination.records import CycleRecords
from playguard_async.coordination.topology import CLUSTER_SLOTS, read_topology
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.engine.cycle import Cycle
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.engine.scheduler import Engine
from playguard_async.engine.services import CycleServices
from playguard_async.phases.protocol import PhaseContext, PhaseReport
from playguard_async.remote.ssh import RemoteSession, open_session
from playguard_lab import DockerDaemon, MissingBinary, SshServer
from playguard_lab.topologies import ClusterLab, LabTls, RedisNode, SentinelGroup
from tests.conftest import skip_or_fail
from tests.support.cli import Playguard, hold_lock
from tests.support.daemon import DaemonRunner, marquee_entry
from tests.support.engine import EngineHarness, ScriptedPhase, settings_for
from tests.support.fencing import host_fence, journal
from tests.support.state import StaticState
from tests.support.topologies import TopologyUnderTest, client_for
from tests.support.world import LAB_OPTIONS, lab_marquee_fields

pytestmark = pytest.mark.integration

NAME = "marquee:edge-1"
TIMEOUT = 1.0


def replicated_lock(redis: RedisClient, ttl: float = 30.0) -> TokenLock:
    return TokenLock(
        redis, NAME, ttl=ttl, timeout=TIMEOUT, replica="test", min_replicas=1, replica_timeout=0.3
    )


@pytest.fixture(scope="module", params=("single", "sentinel", "cluster"))
def tls_topology(request: pytest.FixtureRequest, lab_dir: Path) -> Iterator[tuple[str, LabTls]]:
    """Each topology again, speaking TLS only on every link (clients, replication, cluster bus,
    sentinels), with a certificate made for this run: its ``rediss...`` URL and the certificate."""
    name: str = request.param
    try:
        tls = LabTls(lab_dir / "tls")
        workdir = lab_dir / f"tls-{name}"
        lab = {"single": RedisNode, "sentinel": SentinelGroup, "cluster": ClusterLab}[name](
            workdir, tls=tls
        )
    except MissingBinary as missing:
        skip_or_fail(missing)
    with lab:
        yield lab.url, tls


async def test_tls_serves_the_lock_and_refuses_an_unknown_certificate(
    tls_topology: tuple[str, LabTls],
) -> None:
    url, tls = tls_topology
    trusted = connect_redis(url, socket_timeout=2, tls_ca_file=tls.cert)
    untrusted = connect_redis(url, socket_timeout=2)  # the system CAs: not ours
    acks = 0 if url.startswith("rediss://") else 1  # replicas acknowledge over TLS too
    try:
        # A replica's acknowledgement over TLS took over 0.5 s on a loaded CI machine; what is
        # tested here is that it comes at all, so the wait is generous.
        lock = TokenLock(trusted, NAME, timeout=4.0, min_replicas=acks, replica_timeout=1.5)
        lease = await lock.acquire()
        assert lease is not None
        await lease.renew()
        assert await lease.release() is ReleaseResult.RELEASED
        with pytest.raises(LockUnavailable) as refused:
            await TokenLock(untrusted, NAME, timeout=2.0).acquire()
        if not url.startswith("rediss+sentinel"):  # Sentinel discovery hides why: a timeout
            assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value.__cause__)
    finally:
        await trusted.aclose()
        await untrusted.aclose()


async def test_min_replicas_grants_and_renews_when_a_replica_acknowledges(
    replicated: TopologyUnderTest,
) -> None:
    lease = await replicated_lock(replicated.redis).acquire()
    assert lease is not None
    replicated.flush_scripts()  # as a promoted replica knows none: NOSCRIPT, then EVAL
    await lease.renew()
    assert await lease.release() is ReleaseResult.RELEASED


async def test_min_replicas_refuses_a_lease_no_replica_acknowledged(
    replicated: TopologyUnderTest,
) -> None:
    for replica in replicated.replicas(lock_key(NAME)):
        replica.pause()
    lease = await replicated_lock(replicated.redis).acquire()
    assert lease is None, "an unreplicated lease is not granted"
    assert await replicated.redis.exists(lock_key(NAME)) == 0, "what it wrote is deleted again"


async def test_min_replicas_renewal_nobody_acknowledged_is_lost_unreplicated(
    replicated: TopologyUnderTest,
) -> None:
    lease = await replicated_lock(replicated.redis).acquire()
    assert lease is not None
    for replica in replicated.replicas(lock_key(NAME)):
        replica.pause()
    with pytest.raises(LockLost) as lost:
        await lease.renew()
    assert lost.value.reason == "unreplicated"
    assert await lease.release() is ReleaseResult.RELEASED


class FencedProbe:
    """A phase that writes its fence on the host, counts the holders inside it at once, and
    holds its first holder at ``gate`` (so a failover can happen mid-cycle)."""

    name = "probe"

    def __init__(self) -> None:
        self.inside: set[str] = set()
        self.most = 0
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def __call__(self, ctx: PhaseContext[RemoteSession]) -> PhaseReport:
        self.inside.add(ctx.lease.token)
        self.most = max(self.most, len(self.inside))
        try:
            session = await ctx.remote()
            await session.change(f"probe writes fence {ctx.lease.fence}", ["true"])
            self.entered.set()
            await self.gate.wait()
            return PhaseReport()
        finally:
            self.inside.discard(ctx.lease.token)


@pytest.fixture
def marquee(ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path) -> Marquee:
    return Marquee.model_validate(lab_marquee_fields(ssh_server, docker_daemon, tmp_path / "w"))


def engine_for(redis: RedisClient, marquee: Marquee, replica: str, probe: FencedProbe) -> Engine:
    settings = settings_for(replica_id=replica, lock_ttl=30.0, redis_socket_timeout=2.0)
    services = CycleServices.build(
        settings,
        redis,
        [probe],
        open_session=lambda marquee, lease, dry_run, cycle_id, read_through: open_session(
            marquee,
            LAB_OPTIONS,
            lease=lease,
            dry_run=dry_run,
            cycle_id=cycle_id,
            read_through=read_through,
        ),
    )
    return Engine(services, StaticState(Inventory(marquees=[marquee])))


def lone_engine(url: str, marquee: Marquee) -> tuple[RedisClient, Engine]:
    """One replica's engine on ``url`` whose probe never waits: a client and the engine."""
    probe = FencedProbe()
    probe.gate.set()
    redis = client_for(url, timeout=2.0)
    return redis, engine_for(redis, marquee, "a", probe)


async def cycle(engine: Engine, marquee: Marquee) -> CycleResult:
    return await Cycle(engine.services, marquee, await engine.load_inventory()).run()


async def test_sentinel_failover_mid_cycle_never_has_two_holders_and_converges(
    sentinel: SentinelGroup, marquee: Marquee
) -> None:
    probe = FencedProbe()
    clients = [client_for(sentinel.url, timeout=2.0) for _ in range(2)]
    first, second = (engine_for(c, marquee, r, probe) for c, r in zip(clients, "ab", strict=True))
    try:
        await clients[0].flushall()
        held = asyncio.create_task(cycle(first, marquee))
        await probe.entered.wait()
        failover = asyncio.create_task(asyncio.to_thread(sentinel.fail_primary))
        during: list[CycleResult] = []
        while not failover.done():  # the other replica keeps trying all through the failover
            during.append(await cycle(second, marquee))
            await asyncio.sleep(0.05)  # pacing, not synchronisation
        await failover
        probe.gate.set()
        ended = await held
        ticks = [[await cycle(first, marquee), await cycle(second, marquee)] for _ in range(2)]
    finally:
        probe.gate.set()
        for client in clients:
            await client.aclose()

    assert ended.outcome in {Outcome.OK, Outcome.LOCK_LOST}, ended
    assert {result.outcome for result in during} <= {Outcome.LOCKED, Outcome.REDIS_UNAVAILABLE}
    assert probe.most == 1, "never two holders inside the phase at once"
    assert any(result.outcome is Outcome.OK for result in ticks[0] + ticks[1]), ticks
    assert marquee.state_dir is not None
    fences = [entry.fence for entry in journal(Path(marquee.state_dir))]
    assert fences == sorted(fences), "no write from an older lease after a newer one"


async def test_sentinel_failover_to_a_replica_that_missed_fences_heals_at_the_host(
    sentinel: SentinelGroup, marquee: Marquee
) -> None:
    redis, engine = lone_engine(sentinel.url, marquee)
    try:
        await redis.flushall()
        before = [await cycle(engine, marquee) for _ in range(2)]  # fences 1, 2 replicated
        sentinel.cut_replicas()
        missed = [await cycle(engine, marquee) for _ in range(2)]  # 3, 4 on the primary alone
        await asyncio.to_thread(sentinel.fail_primary)
        after = [await cycle(engine, marquee) for _ in range(2)]
        counter = await redis.get(fence_key(marquee_lock_name(marquee.name)))
    finally:
        await redis.aclose()

    assert [(r.outcome, r.fence) for r in before + missed] == [
        (Outcome.OK, f) for f in (1, 2, 3, 4)
    ]
    # The promoted replica's counter stood at 2: its next fence (3) is refused by the host, which
    # holds 4; the engine lifts the counter to 4 and the next lease (5) passes.
    assert [(r.outcome, r.reason, r.fence) for r in after] == [
        (Outcome.LOCK_LOST, "fenced", 3),
        (Outcome.OK, None, 5),
    ]
    assert counter == b"5"
    assert marquee.state_dir is not None
    assert host_fence(Path(marquee.state_dir)) == 5
    fences = [entry.fence for entry in journal(Path(marquee.state_dir))]
    assert fences == [1, 2, 3, 4, 5], "the host never accepted the lower fence"


async def test_cluster_resharding_of_a_marquees_slot_mid_run_loses_nothing(
    cluster: ClusterLab, marquee: Marquee
) -> None:
    redis, engine = lone_engine(cluster.url, marquee)
    slot = key_slot(lock_key(marquee_lock_name(marquee.name)).encode())
    try:
        await redis.flushall()
        results = [await cycle(engine, marquee) for _ in range(2)]
        source = cluster.owner_of(slot)
        target = next(node for node in cluster.primaries() if node is not source)
        half_moved, cycled = threading.Event(), threading.Event()

        def hold_half_moved() -> None:
            half_moved.set()
            cycled.wait(10)

        moving = asyncio.create_task(
            asyncio.to_thread(cluster.move_slot, slot, target, between=hold_half_moved)
        )
        while not moving.done():
            results.append(await cycle(engine, marquee))
            if half_moved.is_set():
                cycled.set()  # a cycle ran while the slot was half moved
        await moving
        results += [await cycle(engine, marquee) for _ in range(2)]
        counter = await redis.get(fence_key(marquee_lock_name(marquee.name)))
    finally:
        await redis.aclose()

    assert cluster.owner_of(slot) is target
    outcomes = [r.outcome for r in results]
    # Mid-migration a multi-key script is told TRYAGAIN (one key moved, one not): an acquire
    # (lock, fence, pause) takes no lease and writes nothing; a renewal (lock, pause) is not
    # provably done, so that cycle stops as lock_lost. No fence is lost or handed out twice.
    assert set(outcomes) <= {Outcome.OK, Outcome.REDIS_UNAVAILABLE, Outcome.LOCK_LOST}, results
    assert {r.reason for r in results if r.outcome is Outcome.LOCK_LOST} <= {"unreachable"}
    assert outcomes[-2:] == [Outcome.OK, Outcome.OK]
    fences = [r.fence for r in results if r.fence is not None]  # every lease taken
    assert fences == list(range(1, len(fences) + 1)), fences
    assert counter == str(len(fences)).encode()


async def test_topology_names_primaries_replicas_and_when_min_replicas_cannot_be_met(
    topology: TopologyUnderTest,
) -> None:
    seen = await read_topology(topology.redis, parse_redis_url(topology.url), timeout=2.0)
    expected = {"single": (1, 0), "sentinel": (1, 2), "cluster": (3, 1)}[topology.name]
    assert seen.mode == topology.name
    assert (len(seen.primaries), {p.in_sync() for p in seen.primaries}) == (
        expected[0],
        {expected[1]},
    )
    assert all(r.lag_seconds is not None for p in seen.primaries for r in p.replicas)
    assert seen.slots_served == (CLUSTER_SLOTS if topology.name == "cluster" else None)
    assert seen.problems(expected[1]) == []
    [*problems] = seen.problems(expected[1] + 1)
    assert len(problems) == expected[0]
    assert all(f"lock_min_replicas = {expected[1] + 1} cannot be met" in p for p in problems)
    served = {node.port for node in map(topology.node_serving, ["a", "b", "c"])}
    assert served <= {int(p.address.rsplit(":", 1)[1]) for p in seen.primaries}


async def test_cycle_records_are_written_and_read_back_on_each_topology(
    topology: TopologyUnderTest,
) -> None:
    records = CycleRecords(topology.redis, history_length=2, timeout=2.0)
    for number in range(3):
        await records.record("edge-1", {"cycle": number})
    assert await records.last("edge-1") == {"cycle": 2}
    assert await records.history("edge-1") == [{"cycle": 2}, {"cycle": 1}]
    assert records.unwritten("edge-1") == 0


@pytest.mark.parametrize("lab_fixture", ["sentinel", "cluster"])
def test_cli_lists_locks_and_checks_the_topology_on_sentinel_and_cluster(
    request: pytest.FixtureRequest, lab_fixture: str, tmp_path: Path
) -> None:
    lab: SentinelGroup | ClusterLab = request.getfixturevalue(lab_fixture)
    playguard = Playguard(DaemonRunner(tmp_path, lab.url))
    playguard.configure(
        {"marquees": [marquee_entry("m1")]}, lock_min_replicas=2, lock_replica_timeout=0.2
    )
    lease = hold_lock(lab.url, "m1")
    try:
        listed = playguard("locks")
        checked = playguard("check")
    finally:
        asyncio.run(release(lab.url, lease.record))
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert re.search(
        rf"^ *marquee:m1 +other-replica +\S+ +{os.getpid()} +\S+ +{lease.fence} +",
        listed.stdout,
        re.MULTILINE,
    ), listed.stdout
    [topology] = [line for line in checked.stdout.splitlines() if "redis topology" in line]
    # Sentinel's primary has two replicas: 2 can be met. A Cluster's primaries have one each.
    assert ("FAIL" in topology) is (lab_fixture == "cluster"), checked.stdout
    assert checked.stdout.count("cannot be met") == (3 if lab_fixture == "cluster" else 0)


async def release(url: str, record: str) -> None:
    redis = connect_redis(url)
    try:
        await TokenLock(redis, marquee_lock_name("m1")).compare_and_delete(record)
    finally:
        await redis.aclose()


async def test_engine_with_min_replicas_runs_no_phase_on_an_unreplicated_lease(
    replicated: TopologyUnderTest,
) -> None:
    phase = ScriptedPhase("probe")
    harness = EngineHarness(replicated.redis, phase, lock_min_replicas=1, lock_replica_timeout=0.1)
    for replica in replicated.replicas(marquee_lock_key("m1")):
        replica.pause()
    refused = await harness.cycle()
    for replica in replicated.replicas(marquee_lock_key("m1")):
        replica.resume()
    granted = await harness.cycle()
    assert refused.outcome is Outcome.LOCKED
    assert granted.outcome is Outcome.OK
    assert phase.entered == ["m1"], "the phase ran under the acknowledged lease only"
