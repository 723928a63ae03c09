"""Told once: three replicas, one real Redis, a real HTTP receiver on loopback.

Each replica is an engine of its own with its own ``ChangeNotifier``; they take turns on one
Marquee as replicas do when the fleet moves between them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import health_key, marquee_lock_key, rollback_blocked_key
from playguard_async.coordination.told import first_telling, forget_telling
from playguard_async.cycle_record import NoticeKind
from playguard_async.desired_state.model import Marquee
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.phases.protocol import Notice, Phase, PhaseContext, PhaseReport
from playguard_async.service import notifications
from playguard_async.service.notifications import ChangeNotifier
from playguard_lab import DockerDaemon, SshServer
from tests.support.daemon import DaemonRunner, wait_for
from tests.support.engine import EngineHarness, ScriptedPhase, settings_for
from tests.support.fencing import Fleet
from tests.support.world import lab_marquee_fields

pytestmark = pytest.mark.integration

SECRET = "hook-secret-\u00e9"
TOKEN_PATH = "/hooks/T0KEN-in-the-path"


@dataclass
class Receiver:
    """An HTTP server on loopback that answers with ``statuses`` in turn (then 200)."""

    statuses: list[int] = field(default_factory=list)
    delay: float = 0.0
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.received.append((dict(request.headers), body))
        await asyncio.sleep(self.delay)
        return web.Response(status=self.statuses.pop(0) if self.statuses else 200)

    def news(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.received]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    got = Receiver()
    app = web.Application()
    app.router.add_post(TOKEN_PATH, got.handle)
    # A handler still sleeping out ``delay`` when the test ends answers no one (the notifier gave
    # up on it): cancelled after half a second rather than awaited (aiohttp's default: 60 s).
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    got.url = f"http://127.0.0.1:{port}{TOKEN_PATH}"
    try:
        yield got
    finally:
        await runner.cleanup()


class Replica:
    """An engine whose one phase fails while ``failing`` is set (or is ``phase``), with its
    notifier."""

    def __init__(
        self, redis: Redis, name: str, url: str, phase: Phase | None = None, **settings: Any
    ) -> None:
        self.failing = False
        self.steal = False

        async def act(ctx: PhaseContext) -> None:
            if self.steal:
                await redis.set(marquee_lock_key("m1"), "intruder")
            if self.failing:
                raise RuntimeError("compose refused: port 80 taken")

        self.notifier = ChangeNotifier(
            settings_for(
                replica_id=name,
                webhook_url=url,
                webhook_secret=SECRET,
                webhook_timeout=1.0,
                **settings,
            ),
            redis,
        )
        self.harness = EngineHarness(
            redis,
            phase or ScriptedPhase("only", act),
            listeners=[self.notifier.notify_cycle],
            replica_id=name,
        )

    async def cycle(self) -> CycleResult:
        return await self.harness.cycle()


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_three_replicas_tell_each_change_once_signed(
    redis: Redis, receiver: Receiver
) -> None:
    replicas = [Replica(redis, f"r{n}", receiver.url) for n in (1, 2, 3)]
    async with (
        replicas[0].notifier.sending(drain=5),
        replicas[1].notifier.sending(drain=5),
        replicas[2].notifier.sending(drain=5),
    ):
        for replica in replicas:
            replica.failing = True
            assert (await replica.cycle()).outcome is Outcome.PHASE_FAILED
        replicas[1].failing = False
        assert (await replicas[1].cycle()).outcome is Outcome.OK
        for replica in (replicas[0], replicas[2]):
            replica.failing = False
            assert (await replica.cycle()).outcome is Outcome.OK
        for replica in replicas[:2]:
            replica.steal = True
            assert (await replica.cycle()).outcome is Outcome.LOCK_LOST
            replica.steal = False
            await redis.delete(marquee_lock_key("m1"))  # the intruder's, left by the release
        await until(lambda: len(receiver.received) >= 3, "three notifications")
    news = receiver.news()
    assert [(n["marquee"], n["transition"]) for n in news] == [
        ("m1", "failing"),
        ("m1", "recovered"),
        ("m1", "lock_lost"),
    ]
    assert [n["replica"] for n in news] == ["r1", "r2", "r1"]
    assert "port 80 taken" in news[0]["reason"]
    for headers, body in receiver.received:
        expected = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert headers["X-Playguard-Signature"] == f"sha256={expected}"
        assert headers["Content-Type"] == "application/json"
        assert headers["User-Agent"].startswith("playguard/")


async def test_an_unhealthy_playground_is_told_once_however_many_cycles_hold_it_back(
    redis: Redis, receiver: Receiver
) -> None:
    """A rollback's cycle and the cycles that keep the Playground on its last good state all end
    ``unhealthy``: one ``failing`` notification, then one ``recovered`` when a good release is
    applied."""
    why: list[str] = ["playground web-main rolled back to its last good state"]

    class Gate:
        name = "reconcile_playgrounds"

        async def __call__(self, ctx: PhaseContext) -> PhaseReport:
            return PhaseReport(unhealthy=why[0] if why else None)

    replica = Replica(redis, "r1", receiver.url, Gate())
    async with replica.notifier.sending(drain=5):
        outcomes = [(await replica.cycle()).outcome for _ in range(4)]
        why.clear()
        outcomes.append((await replica.cycle()).outcome)
        await until(lambda: len(receiver.received) >= 2, "two notifications")
    assert outcomes == [Outcome.UNHEALTHY] * 4 + [Outcome.OK]
    news = receiver.news()
    assert [(n["transition"], n["outcome"]) for n in news] == [
        ("failing", "unhealthy"),
        ("recovered", "ok"),
    ]
    assert news[0]["reason"] == "playground web-main rolled back to its last good state"


async def test_a_blocked_rollback_is_sent_once_by_the_cycle_that_gives_its_notice(
    redis: Redis, receiver: Receiver
) -> None:
    """reconcile_playgrounds gives the ``rollback_blocked`` notice in the first cycle that finds
    the parts missing (``coordination.told``): three cycles that stay blocked send one
    ``failing`` and one ``rollback_blocked``, with what is missing and no more."""
    words = ".env copy ~/.local/state/playguard/m1/playgrounds/web-main.env is missing"
    cycles: list[int] = []

    class Gate:
        name = "reconcile_playgrounds"

        async def __call__(self, ctx: PhaseContext) -> PhaseReport:
            cycles.append(1)
            told = (
                [Notice(NoticeKind.ROLLBACK_BLOCKED, "web-main", words)] if len(cycles) == 1 else []
            )
            return PhaseReport(notices=told, unhealthy=f"not rolled back: {words}")

    replica = Replica(redis, "r1", receiver.url, Gate())
    async with replica.notifier.sending(drain=5):
        outcomes = [(await replica.cycle()).outcome for _ in range(3)]
    assert outcomes == [Outcome.UNHEALTHY] * 3
    news = receiver.news()
    assert sorted(n["transition"] for n in news) == ["failing", "rollback_blocked"]
    [blocked] = [n for n in news if n["transition"] == "rollback_blocked"]
    assert blocked["reason"] == f"web-main: {words}"


async def test_a_write_the_host_refused_is_told_once_whichever_replica_saw_it(
    redis: Redis,
    receiver: Receiver,
    ssh_server: SshServer,
    docker_daemon: DockerDaemon,
    tmp_path: Path,
) -> None:
    """Two replicas each have a write refused by the lab host's real fence guard (its fence ahead
    of Redis's counter, as after a lost INCR): one ``fenced`` notification, from the first."""
    marquee = Marquee.model_validate(lab_marquee_fields(ssh_server, docker_daemon, tmp_path / "w"))
    assert marquee.state_dir is not None
    state = Path(marquee.state_dir)
    state.mkdir(mode=0o700)
    (state / "journal").write_text("")
    replicas = []
    for name in ("r1", "r2"):
        notifier = ChangeNotifier(
            settings_for(replica_id=name, webhook_url=receiver.url, webhook_timeout=1.0), redis
        )
        fleet = Fleet(
            redis, marquee, tmp_path / name, replica_id=name, listeners=[notifier.notify_cycle]
        )
        replicas.append((fleet, notifier))
    async with replicas[0][1].sending(drain=5), replicas[1][1].sending(drain=5):
        for host_fence, (fleet, _) in zip((100, 200), replicas, strict=True):
            (state / "fence").write_text(f"{host_fence}\n")  # ahead of the lifted counter too
            refused = await fleet.cycle()
            assert (refused.outcome, refused.reason) == (Outcome.LOCK_LOST, "fenced")
            assert fleet.second.entered == 0
        await until(lambda: len(receiver.received) >= 1, "the fenced notification")
    news = receiver.news()
    assert [(n["marquee"], n["transition"], n["replica"]) for n in news] == [
        (marquee.name, "fenced", "r1")
    ]
    assert news[0]["reason"] == "fenced"


async def test_a_failing_receiver_is_retried_and_a_refusing_one_is_not(
    redis: Redis, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notifications, "BACKOFF", 0.01)
    replica = Replica(redis, "r1", receiver.url, webhook_retries=3)
    receiver.statuses = [500, 503, 429]
    with capture_logs() as logs:
        async with replica.notifier.sending(drain=5):
            replica.failing = True
            await replica.cycle()
            await until(lambda: len(receiver.received) == 4, "four attempts")
            receiver.statuses = [400]
            replica.failing = False
            await replica.cycle()
            await until(lambda: len(receiver.received) == 5, "one attempt")
            await until(lambda: not replica.notifier.waiting, "the queue drained")
    sent = [entry for entry in logs if entry["event"] == "notify.sent"]
    failed = [entry for entry in logs if entry["event"] == "notify.failed"]
    assert [entry["attempts"] for entry in sent] == [4]
    refused = [(entry["transition"], entry["error"]) for entry in failed]
    assert refused == [("recovered", "HTTP 400")]
    assert TOKEN_PATH not in repr(logs), "the webhook URL's token reached a log line"


async def test_a_hanging_receiver_never_holds_up_a_cycle(
    redis: Redis, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notifications, "BACKOFF", 0.01)
    receiver.delay = 30.0
    replica = Replica(redis, "r1", receiver.url, webhook_retries=1)
    with capture_logs() as logs:
        async with replica.notifier.sending(drain=0.2):
            replica.failing = True
            async with asyncio.timeout(2.0):  # the cycle, not the 30 s answer
                assert (await replica.cycle()).outcome is Outcome.PHASE_FAILED
            await until(
                lambda: any(entry["event"] == "notify.failed" for entry in logs),
                "the timed-out post given up",
            )
    failed = [entry for entry in logs if entry["event"] == "notify.failed"]
    assert failed[0]["url"] == receiver.url.removesuffix(TOKEN_PATH)
    assert len(receiver.received) == 2


async def test_news_beyond_the_queue_limit_drops_the_oldest_and_says_so(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notifications, "QUEUE_LIMIT", 3)
    replica = Replica(redis, "r1", "http://127.0.0.1:9/never")
    with capture_logs() as logs:
        for n in range(5):  # not sending: nothing drains the queue
            replica.failing = n % 2 == 0
            await replica.cycle()
    assert len(replica.notifier.waiting) == 3
    assert replica.notifier.dropped == 2
    assert [entry["dropped"] for entry in logs if entry["event"] == "notify.dropped"] == [
        1,
        2,
    ]


@pytest.mark.parametrize(
    "garbage", [b"", b"\xff\xfe", b"failing\n", b"x" * 10_000, b"\x1b[31mok\x1b[0m"]
)
async def test_a_health_value_this_project_did_not_write_reads_as_unknown(
    redis: Redis, garbage: bytes
) -> None:
    replica = Replica(redis, "r1", "http://127.0.0.1:9/never")
    await redis.set(health_key("m1"), garbage)
    replica.failing = True
    await replica.cycle()
    assert [news["transition"] for news in replica.notifier.waiting] == ["failing"]
    assert await redis.get(health_key("m1")) == b"failing"


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1/x", "127.0.0.1:8080/x", "http:///nohost", "file:///etc/passwd"]
)
def test_a_webhook_url_that_is_not_http_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(Exception, match="webhook_url") as refused:
        settings_for(webhook_url=url)
    assert url not in str(refused.value)


class _Collecting(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((dict(self.headers), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.timeout(60)
def test_replica_processes_tell_each_failing_marquee_once(daemons: DaemonRunner) -> None:
    handler = type("Handler", (_Collecting,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    url = f"http://127.0.0.1:{server.server_address[1]}{TOKEN_PATH}"
    try:
        daemons.write_inventory(["m1", "m2"])
        fleet = [
            daemons.start(
                replica,
                phases=["sync_git"],  # its first step connects: refused by the missing key
                tick_interval=0.5,
                webhook_url=url,
                webhook_secret=SECRET,
            )
            for replica in ("r1", "r2")
        ]

        def failed_cycles() -> int:
            return sum(
                line["outcome"] not in ("ok", "locked")
                for daemon in fleet
                for line in daemon.events("cycle.finished")
            )

        wait_for(lambda: failed_cycles() >= 8, timeout=30, what="four failed cycles a Marquee")
        statuses = daemons.stop_all(fleet, timeout=15)
    finally:
        server.shutdown()
        server.server_close()
    assert statuses == {"r1": 0, "r2": 0}
    news = sorted(
        (body["marquee"], body["transition"]) for body in map(json.loads, bodies(handler))
    )
    assert news == [("m1", "failing"), ("m2", "failing")]
    for daemon in fleet:
        assert TOKEN_PATH not in daemon.stderr_path.read_text(), "the webhook token was logged"


def bodies(handler: type[_Collecting]) -> list[bytes]:
    return [body for _, body in handler.received]


async def test_told_once_per_fingerprint_until_forgotten_and_over_a_key_of_another_type(
    redis: Redis,
) -> None:
    """``coordination.told`` on a real Redis: each new fingerprint is news once, the same one
    again is not, a forgotten one is news again; a key of another type (written by hand) is
    replaced with one line naming it, and what it held is news."""
    key = rollback_blocked_key("m1")
    await redis.delete(key)
    await redis.rpush(key, "a list")

    with capture_logs() as logs:
        told = [await first_telling(redis, "m1", "web-main", "f1", 2.0)]
        told.append(await first_telling(redis, "m1", "web-main", "f1", 2.0))
        told.append(await first_telling(redis, "m1", "web-other", "f1", 2.0))
        told.append(await first_telling(redis, "m1", "web-main", "f2", 2.0))
        told.append(await first_telling(redis, "m1", "web-main", "f2", 2.0))
        await forget_telling(redis, "m1", "web-main", 2.0)
        told.append(await first_telling(redis, "m1", "web-main", "f2", 2.0))

    assert told == [True, False, True, True, False, True]
    assert [entry["key"] for entry in logs if entry["event"] == "told.foreign_key"] == [key]
    assert await redis.hgetall(key) == {b"web-main": b"f2", b"web-other": b"f1"}
