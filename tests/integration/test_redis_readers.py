"""Issue 48: the daemon's long-lived Redis readers never hold the event loop and always resume.

First what redis-py 8.1 does (the cause, kept as a test so that an upgrade that fixes it says so),
then the cycle-end follower meeting exactly that, then every reader alone (``reader_harness``, each
in a process of its own inside a network namespace) through generated sequences of real faults:
black holes long and short, SIGSTOP, a restart without persistence, connections reset by the
server and by a fault proxy mid-message.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from playguard_async.coordination.client import connect_redis
from playguard_async.coordination.keys import CYCLE_ENDED_CHANNEL, REPLICAS_KEY, last_cycle_key
from playguard_async.coordination.records import follow_cycle_ends
from playguard_lab import RedisServer
from playguard_lab.process import tree_cpu_seconds
from tests.support.daemon import REPO_ROOT, wait_for
from tests.support.fault_proxy import Direction, ThreadedProxy
from tests.support.netns import Namespace
from tests.support.reader_harness import MARQUEE, REPLICA

pytestmark = pytest.mark.integration


def timed_out(pubsub: Any) -> None:
    """What the event loop's transport does when the kernel ends a connection with ETIMEDOUT
    (keepalive or TCP_USER_TIMEOUT after a black hole): the stream's reads raise it."""
    pubsub.connection._reader.set_exception(TimeoutError(errno.ETIMEDOUT, "Connection timed out"))


async def test_redis_py_takes_a_timed_out_connection_for_no_message(redis: Redis) -> None:
    """The cause, as a minimal reproduction: once the stream holds ETIMEDOUT (an OSError that
    Python makes a ``TimeoutError``), ``get_message(timeout=1.0)`` answers None at once, forever,
    without ever suspending: redis-py 8.1 reads its own read timeout into it and keeps the
    connection. If this fails after an upgrade, redis-py no longer does it (``kits.turns`` still
    guards against its like)."""
    pubsub = redis.pubsub()
    await pubsub.subscribe("playguard-test:no-message")
    assert await pubsub.get_message(timeout=1.0) is not None  # the subscribe confirmation
    timed_out(pubsub)
    other_ran = False

    async def other() -> None:
        nonlocal other_ran
        other_ran = True

    asyncio.get_running_loop().call_soon(asyncio.ensure_future, other())
    answers = [await pubsub.get_message(timeout=1.0) for _ in range(1_000)]
    try:
        assert answers == [None] * 1_000
        assert not other_ran, "a thousand one-second waits never gave the loop back"
        assert pubsub.connection is not None
        assert pubsub.connection.is_connected
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def test_cycle_end_follower_starts_again_on_a_timed_out_connection(redis: Redis) -> None:
    made: list[Any] = []
    pubsub_of = redis.pubsub

    def recorded() -> Any:
        made.append(pubsub_of())
        return made[-1]

    redis.pubsub = recorded  # type: ignore[method-assign,assignment]
    ended: list[str] = []
    resumed = asyncio.Event()
    stop = asyncio.Event()
    follower = asyncio.ensure_future(follow_cycle_ends(redis, ended.append, resumed.set, stop))
    turned = 0

    async def turning() -> None:
        nonlocal turned
        while not stop.is_set():
            await asyncio.sleep(0.01)
            turned += 1

    ticker = asyncio.ensure_future(turning())
    try:
        async with asyncio.timeout(20):
            while "m-before" not in ended:
                await redis.publish(CYCLE_ENDED_CHANNEL, "m-before")
                await asyncio.sleep(0.05)
            timed_out(made[0])
            await resumed.wait()
            before = turned
            while "m-after" not in ended:
                await redis.publish(CYCLE_ENDED_CHANNEL, "m-after")
                await asyncio.sleep(0.1)
        assert len(made) >= 2, "the subscription started again on a new connection"
        assert not made[0].connection, "the timed-out connection was let go"
        assert turned > before, "the loop kept turning"
    finally:
        stop.set()
        await asyncio.wait([follower, ticker])


async def test_a_pooled_connection_closed_under_its_reader_is_replaced_not_reused(
    live_redis_server: RedisServer,
) -> None:
    """The kernel ended an idle pooled connection (ETIMEDOUT): the loop closed its transport and
    handed the error to its stream. The next command gets a new connection and its answer,
    where redis-py alone would write to the closed transport (``coordination.live_connections``).
    """
    client = connect_redis(live_redis_server.url, socket_timeout=1, connect_timeout=1)
    assert isinstance(client, Redis)
    try:
        assert await client.ping()
        pool = client.connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        writer = connection._writer
        assert writer is not None
        writer.transport._force_close(TimeoutError(errno.ETIMEDOUT, "Connection timed out"))
        await asyncio.sleep(0)  # the transport tells its stream, as the loop does
        await pool.release(connection)
        assert await client.ping()
        assert connection._writer is None or connection._writer is not writer
    finally:
        await client.aclose()


# -- every reader alone, through generated sequences of real faults ---------------------------

FAULTS = st.one_of(
    st.tuples(st.just("hole"), st.sampled_from([0.5, 5.0])),
    st.tuples(st.just("stop"), st.sampled_from([0.5, 3.0])),
    st.tuples(st.just("restart"), st.just(0.0)),
    st.tuples(st.just("kill_clients"), st.just(0.0)),
    st.tuples(st.just("proxy_reset"), st.just(0.0)),
)
"""A fault and how long it lasts. A black hole of 5 s outlasts the readers' keepalive (2 s:
the kernel ends their connections with ETIMEDOUT, the case that spun); a short one does not."""

READERS = ("cycle_ends", "picture", "roster")
BEAT_GAP = 2.0
"""Seconds between two beats of a reader's loop at most: a loop a reader holds beats no more."""
CPU_SHARE = 0.3
RESUME_WITHIN = 20.0
"""Seconds after the last fault within which each reader delivers again: its back-off's cap
(8 s), a connect timeout, a roster ttl, with room for a loaded machine."""


@dataclass
class Harness:
    """One reader's process and what it wrote so far."""

    reader: str
    process: subprocess.Popen[bytes]
    output: Path
    _read: int = 0
    lines: list[dict[str, Any]] = field(default_factory=list)

    def poll(self) -> list[dict[str, Any]]:
        with self.output.open("rb") as stream:
            stream.seek(self._read)
            data = stream.read()
        whole = data[: data.rfind(b"\n") + 1]
        self._read += len(whole)
        for line in whole.splitlines():
            if line.startswith(b"{"):  # the readers' own log lines are console text
                self.lines.append(json.loads(line))
        return self.lines

    def since(self, moment: float, event: str) -> list[dict[str, Any]]:
        return [line for line in self.poll() if line["event"] == event and line["t"] >= moment]

    def longest_silence(self, since: float, until: float) -> float:
        beats = [since, *(line["t"] for line in self.since(since, "beat") if line["t"] <= until)]
        ends = [*beats[1:], until]
        return float(max(later - earlier for earlier, later in zip(beats, ends, strict=True)))


@contextlib.contextmanager
def harnesses(namespace: Namespace, url: str, workdir: Path) -> Iterator[list[Harness]]:
    started: list[Harness] = []
    try:
        for reader in READERS:
            output = workdir / f"{reader}.jsonl"
            with output.open("wb") as stream:
                process = subprocess.Popen(
                    [*namespace.exec_prefix, sys.executable, "-m",
                     "tests.support.reader_harness", reader, url],
                    stdout=stream, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                    env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, start_new_session=True,
                )  # fmt: skip
            started.append(Harness(reader, process, output))
        yield started
    finally:
        for harness in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(harness.process.pid, signal.SIGKILL)
            harness.process.wait(10)


@dataclass
class Deliveries:
    """Gives each reader something new in Redis and tells whether it came through."""

    store: SyncRedis

    def ask(self, harness: Harness, since: float) -> None:
        """Before waiting for ``harness``: the roster's member is taken out, for the reader's
        next announcement to put back."""
        if harness.reader == "roster":
            with contextlib.suppress(Exception):
                self.store.zrem(REPLICAS_KEY, REPLICA)

    def came(self, harness: Harness, since: float) -> bool:
        """Whether ``harness``'s reader delivered what Redis was given after ``since`` (asked
        again on each call: Pub/Sub keeps nothing for a subscriber that is away)."""
        marker = f"m{int(since * 1000)}"
        try:
            if harness.reader == "roster":
                return self.store.zscore(REPLICAS_KEY, REPLICA) is not None
            if harness.reader == "picture":
                record = json.dumps(
                    {"marquee": MARQUEE, "cycle": marker, "outcome": "ok",
                     "finished_at": time.time(), "duration": 0.1}
                )  # fmt: skip
                self.store.set(last_cycle_key(MARQUEE), record)
                self.store.publish(CYCLE_ENDED_CHANNEL, MARQUEE)
                return any(line.get("cycle") == marker for line in harness.since(since, "picture"))
            self.store.publish(CYCLE_ENDED_CHANNEL, marker)
        except Exception:  # Redis still starting after a restart: ask again at the next poll
            return False
        return any(line.get("name") == marker for line in harness.since(since, "ended"))

    def wait(self, readers: Sequence[Harness], since: float, what: str) -> None:
        for harness in readers:
            self.ask(harness, since)
        for harness in readers:
            wait_for(
                functools.partial(self.came, harness, since), timeout=RESUME_WITHIN, interval=0.5,
                what=f"{harness.reader} delivering {what}",
            )  # fmt: skip


@pytest.mark.timeout(600)
def test_each_reader_alone_never_holds_its_loop_and_resumes_after_any_faults(
    netns: Callable[[Sequence[int]], Namespace], tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        with ThreadedProxy("127.0.0.1", server.port) as proxy:
            namespace = netns([proxy.port])
            url = f"redis://127.0.0.1:{proxy.port}/0"

            store = SyncRedis(port=server.port, socket_timeout=1, socket_connect_timeout=1)
            deliveries = Deliveries(store)
            with store, harnesses(namespace, url, tmp_path) as readers:
                deliveries.wait(readers, 0.0, "at start")

                @settings(
                    max_examples=6, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck),
                )  # fmt: skip
                @given(faults=st.lists(FAULTS, min_size=1, max_size=3))
                @example(faults=[("hole", 5.0)])  # the fault that spun, whatever is drawn
                def faults_then_resume(faults: list[tuple[str, float]]) -> None:
                    began = time.monotonic()
                    cpu = {h.reader: tree_cpu_seconds(h.process.pid) for h in readers}
                    for fault, seconds in faults:
                        inflict(fault, seconds, server, proxy, namespace)
                    deliveries.wait(readers, time.monotonic(), f"after {faults}")
                    ended = time.monotonic()
                    for harness in readers:
                        assert harness.process.poll() is None, harness.output.read_text()[-2000:]
                        silence = harness.longest_silence(began, ended)
                        assert silence < BEAT_GAP, (
                            f"{harness.reader}'s loop held {silence:.1f} s during {faults}"
                        )
                        used = tree_cpu_seconds(harness.process.pid) - cpu[harness.reader]
                        assert used < CPU_SHARE * (ended - began), (
                            f"{harness.reader} used {used:.1f} s of CPU in "
                            f"{ended - began:.1f} s of {faults}"
                        )

                faults_then_resume()
    finally:
        server.stop()


def inflict(
    fault: str, seconds: float, server: RedisServer, proxy: ThreadedProxy, namespace: Namespace
) -> None:
    """One fault, lasting ``seconds`` where it has a length, healed before it returns."""
    if fault == "hole":
        namespace.black_hole(proxy.port)
        time.sleep(seconds)
        namespace.lift(proxy.port)
    elif fault == "stop":
        server.pause()
        time.sleep(seconds)
        server.resume()
    elif fault == "restart":
        server.kill()
        server.start()
    elif fault == "kill_clients":
        with SyncRedis(port=server.port, socket_timeout=1) as client:
            client.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    else:  # a reset mid-message: answers trickle, then every connection is cut
        proxy.throttle(64, (Direction.DOWN,))
        time.sleep(0.5)
        proxy.cut()
        time.sleep(0.5)
        proxy.heal()
