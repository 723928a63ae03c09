"""Server CPU of the web view for a large fleet, two ways.

Per answer (the default): each query a browser may send, answered by the real handler from a
picture set in memory (no Redis: the page never reads it). Prints, per query, the median and
worst CPU time of one answer (rows built, counted, filtered, sorted, one page of 200 rendered)
and the page's size.

    .venv/bin/python bench/web_view.py [--marquees 10000] [--rounds 5]

Open tabs under a stream of cycle ends (``--tabs N``): a child process serves the real web view
(``endpoints.application``, aiohttp on loopback) from a real ``FleetPicture`` whose loop runs as
the daemon's does, its Redis reads answered from memory (each a Marquee with a new last cycle):
so the figures are the pages' and streams' cost, not Redis's. ``--rate`` cycle ends a second
reach the picture as the cycle-end channel's names do. Its share of one core (process CPU over
wall time: the loop is its only thread) is measured for ``--seconds`` with the cycle ends alone,
then with ``N`` tabs held open by another process: each loads its page, holds ``/events`` and
fetches its page again at each new version as that code's ``web_view.js`` does (every version
at once before the one-fetch-in-flight change; one in flight and one more after it since), at
most 6 connections each like a browser. ``same``: every tab on the fleet page; ``mixed``: ten
different fleet queries. With ``--before REF`` the code of git ref ``REF`` is measured first,
in the same run (``code_versions``).

    .venv/bin/python bench/web_view.py --tabs 10 [--rate 100] [--seconds 10] [--before REF]

On a real Redis (``--redis``): the bench starts its own redis-server on an ephemeral loopback
port and writes ``--cycles`` records for each Marquee as the daemon does (``CycleRecords.record``
of ``CycleResult.to_record``: the last record, the history, the PUBLISH of the name). A child
process per code runs a real ``FleetPicture`` on it (its whole read, its subscription to cycle
ends) and measures the CPU (process time: the redis-server is another process) of a fleet-page
render at a new version, and of one live-stream update: a cycle recorded as the daemon does, then
what this process spends on it, the picture's read of that Marquee (told by the PUBLISH), its new
version, and the fleet page rendered again for it as an open tab fetches it. With ``--before
REF`` the code of ``REF`` is measured beside this checkout's, round by round, and the ratios
now/before printed.

    .venv/bin/python bench/web_view.py --redis [--marquees 10000] [--cycles 50] [--rounds 3]
        [--before REF]

Instructions (``--instructions``): this machine's CPU time swings with what else runs, so the
same render is also counted in instructions by callgrind (as ``instructions.py`` does), which
the load leaves alone: a child under valgrind builds the in-memory picture, renders the fleet
page twice (the second finds each row's strip kept, as a page does between versions), then
``--renders`` times at new versions, counted. Each row's history is 50 cycles of the outcomes
``fleet_records`` writes in turn. Needs valgrind; 4-6 minutes per code on this machine.

    .venv/bin/python bench/web_view.py --instructions [--marquees 10000] [--renders 3]
        [--before REF]

Never part of the tests: the targets (under 1 s of CPU per answer at 10,000 Marquees; 10 tabs at
100 cycle ends a second under 10 % of the loop) are read here, not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import inspect
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from aiohttp.typedefs import Handler
from code_versions import run_with, versions  # bench/ is on sys.path

from playguard_async.coordination.lock_record import Holder
from playguard_async.coordination.lock_state import LockState
from playguard_async.coordination.marquee_reads import LastCycle, MarqueeStatus, MarqueeStory
from playguard_async.engine.results import Outcome
from playguard_async.web.fleet_picture import FleetPicture, Listed
from playguard_async.web.view import WebView
from tests.support.fleet_records import OUTCOMES_IN_TURN, write_fleet, written_cycle

QUERIES = (
    "/",
    "/?sort=age&order=desc",
    "/?outcome=phase_failed&sort=duration",
    "/?name=m0999",
    "/?sort=findings&order=desc&page=50",
)

MIXED = (
    *QUERIES,
    "/?page=2",
    "/?sort=duration&order=desc",
    "/?outcome=ok",
    "/?sort=ttl",
    "/?name=m01&sort=age",
)
"""The ten pages of ``mixed`` tabs: each its own render at each version."""

TAB_CONNECTIONS = 6
"""Connections a tab's client opens to the replica at most, as a browser does (HTTP/1.1)."""

VERSION = re.compile(rb'data-version="(\d+)"')


def fleet(count: int, now: float) -> list[MarqueeStatus]:
    outcomes = ("ok", "ok", "ok", "phase_failed", "unreachable", "locked")
    statuses = []
    for index in range(count):
        holder = Holder("t", f"replica-{index % 3}", "host", 1000 + index, "now")
        last = LastCycle(
            cycle=f"c{index}", outcome=outcomes[index % len(outcomes)], phase=None,
            reason=None if index % 6 < 3 else f"ssh to m{index}: connection refused",
            fence=index, host_fence=index, finished_at=now - index % 600,
            duration=0.1 + index % 50 / 10, actions=index % 4,
            drift={f"pg-{index}": ["image changed"]} if index % 10 == 0 else {},
            branch_gone={}, failed=[],
        )  # fmt: skip
        lock = LockState("lock", holder, index, 30.0, b"{}") if index % 20 == 0 else None
        statuses.append(MarqueeStatus(f"m{index:05d}", True, lock, last))
    return statuses


class NoRecords:
    """The bench never reads Redis: the picture is set by hand, or read from memory."""

    redis = None

    async def history(self, marquee: str, *, limit: int | None = None) -> list[Any]:
        return []  # no strip on a row: the per-answer figures stay the page's own


async def no_story(name: str) -> MarqueeStory:
    raise AssertionError("the fleet page reads no story")


def accepted(make: Callable[..., Any], **options: Any) -> dict[str, Any]:
    """``options`` that ``make`` takes: the code before a change may not know the newer ones."""
    parameters = inspect.signature(make).parameters
    return {name: value for name, value in options.items() if name in parameters}


def web_defaults() -> dict[str, Any]:
    """The web view's settings as this code's defaults have them (absent before they existed)."""
    from playguard_async.settings import Settings  # noqa: PLC0415 - the child's code

    fields = Settings.model_fields
    return {
        option: fields[setting].default
        for option, setting in (
            ("publish_interval", "web_update_interval"),
            ("streams_per_client", "web_streams_per_client"),
            ("streams_total", "web_streams_total"),
        )
        if setting in fields
    }


def view_of(picture: FleetPicture, stop: asyncio.Event) -> WebView:
    options = dict(
        replica="bench",
        outcomes=[outcome.value for outcome in Outcome],
        credential=None,
        stop=stop,
        **web_defaults(),
    )
    return WebView(picture, **accepted(WebView, **options))


async def measure(count: int, rounds: int) -> None:
    statuses = fleet(count, time.time())
    names = [Listed(status.name, status.launchable, status.mode) for status in statuses]
    options = dict(interval=60.0, tell_story=no_story, **web_defaults())
    picture = FleetPicture(NoRecords(), lambda: names, **accepted(FleetPicture, **options))  # type: ignore[arg-type]
    picture.statuses = {status.name: status for status in statuses}
    view = view_of(picture, asyncio.Event())
    print(f"{count} Marquees, {rounds} rounds, CPU per answer")
    print(f"{'query':40} {'median ms':>10} {'worst ms':>10} {'KiB':>6}")
    for query in QUERIES:
        spent: list[float] = []
        size = 0
        for _ in range(rounds):
            # A new version each round: the page is rendered, not served again as kept.
            picture.version += 1
            request: Any = make_mocked_request("GET", query)
            started = time.process_time()
            response: Any = await view.fleet(request)
            spent.append(time.process_time() - started)
            size = len(response.body)
        median, worst = statistics.median(spent) * 1000, max(spent) * 1000
        print(f"{query:40} {median:10.1f} {worst:10.1f} {size / 1024:6.0f}")


# --- Open tabs under a stream of cycle ends: the serving child --------------------------------


class Served:
    """The web view of a fleet read from memory, its picture's loop running, on loopback."""

    def __init__(self, count: int) -> None:
        from playguard_async.web import fleet_picture  # noqa: PLC0415 - the child's code

        self.counts: Counter[str] = Counter()
        self.in_flight = 0
        self.stop = asyncio.Event()
        statuses = fleet(count, time.time())
        self.names = [status.name for status in statuses]
        by_name = {status.name: status for status in statuses}
        self.ended: list[Callable[[str], None]] = []

        async def read_status(records: Any, name: str, **desired: Any) -> MarqueeStatus:
            status = by_name[name]
            if status.last is not None:  # a cycle just ended on it
                last = dataclasses.replace(status.last, finished_at=time.time())
                status = by_name[name] = dataclasses.replace(status, last=last)
            return status

        async def follow_cycle_ends(
            redis: Any, ended: Callable[[str], None], resumed: Any, stop: asyncio.Event
        ) -> None:
            self.ended.append(ended)
            await stop.wait()

        fleet_picture.read_status = read_status  # type: ignore[attr-defined]
        fleet_picture.follow_cycle_ends = follow_cycle_ends  # type: ignore[attr-defined,assignment]
        listed = [Listed(status.name) for status in statuses]
        options = dict(interval=10.0, tell_story=no_story, **web_defaults())
        self.picture = FleetPicture(
            NoRecords(),  # type: ignore[arg-type]
            lambda: listed,
            **accepted(FleetPicture, **options),
        )
        self.view = view_of(self.picture, self.stop)

    def count_renders(self) -> None:
        """Count the fleet page's renders (the template's, whatever the code before it does)."""
        environment = self.view.environment
        template = environment.get_template

        def counted(name: Any, *more: Any) -> Any:
            self.counts["renders"] += name == "fleet.html"
            return template(name, *more)

        environment.get_template = counted  # type: ignore[method-assign,assignment]

    def app(self) -> web.Application:
        from playguard_async.service.endpoints import application  # noqa: PLC0415
        from playguard_async.service.liveness import Liveness  # noqa: PLC0415

        async def metrics(request: web.Request) -> web.Response:
            return web.Response(text="")

        options: dict[str, Any] = dict(
            liveness=Liveness(interval=1.0, last_tick=time.monotonic, draining=lambda: False),
            ready=lambda: asyncio.sleep(0, True),
            ready_timeout=1.0,
            metrics=metrics,
            web_view=self.view,
        )
        if "guard" in inspect.signature(application).parameters:  # since the Host check
            from playguard_async.web.http_guard import HostRule, HttpGuard  # noqa: PLC0415

            options["guard"] = HttpGuard(HostRule.bound_to("127.0.0.1"))
        app = application(**options)

        @web.middleware
        async def counted(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path == "/events":
                self.counts["streams"] += 1
                return await handler(request)
            self.counts["pages"] += 1
            self.in_flight += 1
            try:
                return await handler(request)
            finally:
                self.in_flight -= 1

        app.middlewares.append(counted)
        return app

    async def cycle_ends(self, rate: float) -> None:
        """``rate`` names a second, as the cycle-end channel delivers them, spread over the
        fleet; late ones are sent at once (the average rate holds)."""
        period, due, index = 1 / rate, time.monotonic(), 0
        while not self.stop.is_set():
            due += period
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            self.ended[0](self.names[index * 7919 % len(self.names)])
            self.counts["cycle_ends"] += 1
            index += 1


async def longest_gap(done: asyncio.Event, gaps: list[float]) -> None:
    """The longest time the loop was held at once, seen by a 10 ms ticker (coarser than
    ``loop_stall.LoopStall``'s 1 ms, which would cost the loop a few per cent itself)."""
    last = time.perf_counter()
    while not done.is_set():
        await asyncio.sleep(0.01)
        now = time.perf_counter()
        gaps.append(now - last - 0.01)
        last = now


async def window(served: Served, seconds: float) -> dict[str, float]:
    """The loop's share of a core (process CPU / wall) and what happened, over ``seconds``."""
    before = Counter(served.counts)
    done, gaps = asyncio.Event(), [0.0]
    ticker = asyncio.ensure_future(longest_gap(done, gaps))
    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    done.set()
    await ticker
    counts = Counter(served.counts)
    counts.subtract(before)
    return {
        "loop": cpu / wall,
        "stall_ms": max(gaps) * 1000,
        **{f"{name}/s": counts[name] / wall for name in ("cycle_ends", "pages", "renders")},
    }


async def with_tabs(served: Served, base: str, tabs: int, pages: str, seconds: float) -> Any:
    script = resources_text("web_view.js")
    one_in_flight = "fetching" in script  # this code's script keeps one fetch in flight
    argv = [__file__, "--child-tabs", base, "--tabs", str(tabs), "--pages", pages]
    argv += ["--seconds", str(seconds), *(["--one-in-flight"] if one_in_flight else [])]
    child = await asyncio.create_subprocess_exec(
        sys.executable, *argv, stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    assert (await child.stdout.readline()).strip() == b"ready", "the tabs did not start"
    figures = await window(served, seconds)
    tabs_said = json.loads((await child.stdout.read()).decode().strip().splitlines()[-1])
    await child.wait()
    # The tabs' clients are gone; what they asked for before may still be answered: wait.
    async with asyncio.timeout(60):
        while served.in_flight:  # noqa: ASYNC110 - the server's own count
            await asyncio.sleep(0.1)
    return {**figures, **tabs_said, "one_in_flight": one_in_flight}


def resources_text(name: str) -> str:
    from importlib import resources  # noqa: PLC0415

    return resources.files("playguard_async.web").joinpath("static", name).read_text()


async def serve_and_measure(count: int, tabs: int, rate: float, seconds: float) -> dict[str, Any]:
    served = Served(count)
    served.count_renders()
    runner = web.AppRunner(served.app(), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    reading = asyncio.ensure_future(served.picture.run(served.stop))
    while served.picture.version < 1 or not served.ended:  # noqa: ASYNC110 - the first read
        await asyncio.sleep(0.05)
    from playguard_async.kits.collector import settle_new_desired_state  # noqa: PLC0415

    settle_new_desired_state()  # as the daemon does once its desired state is in place
    spent = []
    for _ in range(3):  # what one render of the fleet page costs now, on this machine as it is
        served.picture.version += 1  # a new version: rendered, not served again as kept
        started = time.process_time()
        await served.view.fleet(make_mocked_request("GET", "/"))
        spent.append(time.process_time() - started)
    ending = asyncio.ensure_future(served.cycle_ends(rate))
    try:
        await asyncio.sleep(1.0)  # settled
        row: dict[str, Any] = {"render_ms": statistics.median(spent) * 1000}
        row["alone"] = await window(served, seconds)
        for pages in ("same", "mixed"):
            row[pages] = await with_tabs(served, base, tabs, pages, seconds)
        row["interval"] = web_defaults().get("publish_interval")
        return row
    finally:
        served.stop.set()
        ending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ending
        await reading
        await runner.cleanup()


# --- Open tabs: the tabs' child, as browsers running the page's script ------------------------


@dataclasses.dataclass
class TabFigures:
    events: int = 0
    fetches: int = 0
    most_in_flight: int = 0
    started: int = 0


async def tab(base: str, path: str, one_in_flight: bool, figures: TabFigures) -> None:
    """One browser tab on ``path``: loaded, its stream held, its page fetched again at each new
    version the stream tells, as ``web_view.js`` does (``one_in_flight``: the script since the
    change; else the one before it, a fetch per version however many are in flight)."""
    connector = aiohttp.TCPConnector(limit=TAB_CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector) as session:
        in_flight = 0
        fetching = False
        shown = announced = asked = ""
        kept: set[asyncio.Task[None]] = set()

        async def fetch() -> None:
            nonlocal in_flight, shown
            in_flight += 1
            figures.most_in_flight = max(figures.most_in_flight, in_flight)
            try:
                async with session.get(base + path) as response:
                    body = await response.read()
            finally:
                in_flight -= 1
            figures.fetches += 1
            found = VERSION.search(body)
            shown = found.group(1).decode() if found else shown

        async def refresh() -> None:
            nonlocal fetching, asked
            while True:
                fetching, asked = True, announced
                with contextlib.suppress(aiohttp.ClientError):
                    await fetch()
                fetching = False
                if announced in (asked, shown):
                    return

        def start(work: Any) -> None:
            task = asyncio.ensure_future(work)
            kept.add(task)
            task.add_done_callback(kept.discard)

        await fetch()  # the page's load
        async with session.get(base + "/events") as stream:
            figures.started += 1
            async for line in stream.content:
                if not line.startswith(b"data:"):
                    continue
                figures.events += 1
                announced = str(json.loads(line.removeprefix(b"data:"))["version"])
                if announced == shown:
                    continue
                if one_in_flight:
                    if not fetching:
                        start(refresh())
                else:
                    shown = announced
                    start(fetch())


async def run_tabs(base: str, tabs: int, pages: str, seconds: float, one_in_flight: bool) -> None:
    paths = [MIXED[index % len(MIXED)] if pages == "mixed" else "/" for index in range(tabs)]
    figures = TabFigures()
    running = [asyncio.ensure_future(tab(base, path, one_in_flight, figures)) for path in paths]
    async with asyncio.timeout(60):
        while figures.started < tabs:  # noqa: ASYNC110 - the tabs' own count
            await asyncio.sleep(0.05)
    print("ready", flush=True)
    before = dataclasses.replace(figures)
    await asyncio.sleep(seconds)
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    print(
        json.dumps(
            {
                "events/tab/s": (figures.events - before.events) / tabs / seconds,
                "fetches/s": (figures.fetches - before.fetches) / seconds,
                "most_in_flight": figures.most_in_flight,
            }
        )
    )


# --- On a real Redis: records as the daemon writes them -----------------------------------------


async def on_redis(url: str, count: int, rounds: int, updates: int) -> dict[str, Any]:
    """The CPU of a fleet-page render and of a live update, this code on Redis at ``url``."""
    from playguard_async.coordination.client import connect_redis  # noqa: PLC0415
    from playguard_async.coordination.records import CycleRecords  # noqa: PLC0415
    from playguard_async.kits.collector import settle_new_desired_state  # noqa: PLC0415

    redis = connect_redis(url)
    records = CycleRecords(redis, history_length=50, timeout=30.0)
    listed = [Listed(f"m{index:05d}") for index in range(count)]
    stop = asyncio.Event()
    options = dict(interval=3600.0, tell_story=no_story, publish_interval=0.0)
    picture = FleetPicture(records, lambda: listed, **accepted(FleetPicture, **options))
    view = view_of(picture, stop)
    reading = asyncio.ensure_future(picture.run(stop))
    try:
        async with asyncio.timeout(600):
            while picture.version < 1:  # noqa: ASYNC110 - the first whole read
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the subscription to cycle ends is in place
        settle_new_desired_state()  # as the daemon does once its desired state is in place
        renders, size = [], 0
        for _ in range(rounds + 1):  # the first warms what a page keeps between versions
            picture.version += 1  # a new version: rendered, not served again as kept
            started = time.process_time()
            response: Any = await view.fleet(make_mocked_request("GET", "/"))
            renders.append(time.process_time() - started)
            size = len(response.body)
        spent = []
        for number in range(updates):
            index = number * 7 % min(count, 200)  # rows of the first page, as a tab shows them
            name = f"m{index:05d}"
            await records.record(name, written_cycle(name, index, 1000 + number).to_record())
            seen = picture.version
            started = time.process_time()
            async with asyncio.timeout(30):
                await picture.changed(seen, stop)
            await view.fleet(make_mocked_request("GET", "/"))
            spent.append(time.process_time() - started)
        return {
            "render_ms": statistics.median(renders[1:]) * 1000,
            "first_render_ms": renders[0] * 1000,
            "update_ms": statistics.median(spent) * 1000,
            "update_worst_ms": max(spent) * 1000,
            "kib": size / 1024,
        }
    finally:
        stop.set()
        await reading
        await redis.aclose()


def redis_main(args: argparse.Namespace) -> None:
    from playguard_lab import RedisServer  # noqa: PLC0415

    rounds = args.rounds or 3
    with (
        tempfile.TemporaryDirectory(prefix="web-view-bench-") as workdir,
        RedisServer(Path(workdir)) as server,
    ):
        codes = versions(args.before, Path(workdir))
        started = time.monotonic()
        names = [f"m{index:05d}" for index in range(args.marquees)]
        asyncio.run(write_fleet(server.url, names, args.cycles))
        print(f"{args.marquees} Marquees x {args.cycles} cycles written in "
              f"{time.monotonic() - started:.0f} s; {rounds} rounds of each code")  # fmt: skip
        print(f"{'code':>8} {'render ms':>9} {'first':>6} {'update ms':>9} {'worst':>6} {'KiB':>5}")
        figures: dict[str, list[dict[str, Any]]] = {label: [] for label in codes}
        for _ in range(rounds):
            for label, code in codes.items():
                row = run_with(
                    code, __file__, "--child-redis", server.url,
                    "--marquees", str(args.marquees), "--rounds", "11", "--updates", "20",
                )  # fmt: skip
                figures[label].append(row)
                print(f"{label:>8} {row['render_ms']:9.1f} {row['first_render_ms']:6.0f} "
                      f"{row['update_ms']:9.1f} {row['update_worst_ms']:6.0f} "
                      f"{row['kib']:5.0f}")  # fmt: skip
    if args.before:
        before, now = (figures[label] for label in codes)
        for key in ("render_ms", "update_ms"):
            ratio = statistics.median(n[key] for n in now) / statistics.median(
                b[key] for b in before
            )
            print(f"{key}: now/before {ratio:.2f} (medians over the rounds)")
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"load average {load}; render: one fleet page at a new version (first: the first one "
          "after the whole read); update: a cycle's end to its page rendered again")  # fmt: skip


# --- Instructions per render, counted by callgrind ---------------------------------------------


class RecordedHistories(NoRecords):
    """Every Marquee's history: 50 cycles of the outcomes ``fleet_records`` writes in turn."""

    async def history(self, marquee: str, *, limit: int | None = None) -> list[Any]:
        outcomes = [OUTCOMES_IN_TURN[number % len(OUTCOMES_IN_TURN)] for number in range(50)]
        return [
            {"cycle": f"c{number}", "outcome": outcome, "finished_at": 1e9 + number,
             "duration": 0.5 + number % 7, "actions": {}}
            for number, outcome in enumerate(outcomes)
        ][:limit]  # fmt: skip


async def counted_renders(count: int, renders: int) -> None:
    from instructions import dump_counters  # noqa: PLC0415 - bench/ is on sys.path

    statuses = fleet(count, time.time())
    names = [Listed(status.name, status.launchable, status.mode) for status in statuses]
    options = dict(interval=60.0, tell_story=no_story, **web_defaults())
    picture = FleetPicture(RecordedHistories(), lambda: names, **accepted(FleetPicture, **options))  # type: ignore[arg-type]
    picture.statuses = {status.name: status for status in statuses}
    view = view_of(picture, asyncio.Event())
    for part in range(2):
        for _ in range(2 if part == 0 else renders):
            picture.version += 1  # a new version: rendered, not served again as kept
            await view.fleet(make_mocked_request("GET", "/"))
        dump_counters()


def instructions_main(args: argparse.Namespace) -> None:
    from instructions import counted  # noqa: PLC0415 - bench/ is on sys.path

    with tempfile.TemporaryDirectory(prefix="web-view-bench-") as workdir:
        codes = versions(args.before, Path(workdir))
        per: dict[str, float] = {}
        for label, code in codes.items():
            out = Path(workdir) / f"callgrind-{label}"
            command = [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p",
                sys.executable, __file__, "--child-instructions", "--marquees",
                str(args.marquees), "--renders", str(args.renders),
            ]  # fmt: skip
            env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(code)}
            subprocess.run(command, env=env, capture_output=True, check=True, timeout=3600)
            per[label] = counted(out, 2) / args.renders
            print(f"{label:>8} {per[label]:,.0f} instructions per fleet-page render")
    if args.before:
        before, now = per.values()
        print(f"now/before {now / before:.3f} ({args.marquees} Marquees, {args.renders} renders)")


# --- The parent: both codes side by side --------------------------------------------------------


def tabs_main(args: argparse.Namespace) -> None:
    header = (
        f"{'code':>8} {'pages':>5} {'loop % alone':>12} {'with tabs':>9} {'tabs add':>8} "
        f"{'ends/s':>6} {'events/tab/s':>12} {'fetches/s':>9} {'renders/s':>9} "
        f"{'in flight':>9} {'stall ms alone':>14} {'with tabs':>9} {'render ms':>9}"
    )
    with tempfile.TemporaryDirectory(prefix="web-view-bench-") as workdir:
        codes = versions(args.before, Path(workdir))
        print(f"{args.marquees} Marquees, {args.tabs} tabs, {args.rate:g} cycle ends/s, "
              f"{args.seconds:g} s each")  # fmt: skip
        print(header)
        for _ in range(args.rounds):
            for label, code in codes.items():
                row = run_with(
                    code, __file__, "--child-serve", "--marquees", str(args.marquees),
                    "--tabs", str(args.tabs), "--rate", str(args.rate),
                    "--seconds", str(args.seconds),
                )  # fmt: skip
                alone = row["alone"]
                for pages in ("same", "mixed"):
                    taken = row[pages]
                    print(
                        f"{label:>8} {pages:>5} {alone['loop'] * 100:12.1f} "
                        f"{taken['loop'] * 100:9.1f} {(taken['loop'] - alone['loop']) * 100:8.1f} "
                        f"{taken['cycle_ends/s']:6.0f} {taken['events/tab/s']:12.1f} "
                        f"{taken['fetches/s']:9.1f} {taken['renders/s']:9.1f} "
                        f"{taken['most_in_flight']:9d} {alone['stall_ms']:14.0f} "
                        f"{taken['stall_ms']:9.0f} "
                        f"{row['render_ms']:9.0f}"
                    )
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"load average {load}; loop % = the serving process's CPU over wall time; render ms: "
          "one fleet page of the code, measured in its process before the windows")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--marquees", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=None, help="5 per answer, 1 with --tabs")
    parser.add_argument("--tabs", type=int, default=0, help="open tabs (0: per answer only)")
    parser.add_argument("--rate", type=float, default=100.0, help="cycle ends a second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--pages", choices=("same", "mixed"), default="same")
    parser.add_argument("--before", help="git ref of code to measure beside this checkout")
    parser.add_argument("--redis", action="store_true", help="on a real Redis (the module's doc)")
    parser.add_argument("--cycles", type=int, default=50, help="records written per Marquee")
    parser.add_argument("--updates", type=int, default=20, help=argparse.SUPPRESS)
    parser.add_argument("--child-redis", help=argparse.SUPPRESS)
    parser.add_argument("--instructions", action="store_true", help="counted by callgrind")
    parser.add_argument("--renders", type=int, default=3, help="renders counted (--instructions)")
    parser.add_argument("--child-instructions", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-tabs", help=argparse.SUPPRESS)
    parser.add_argument("--one-in-flight", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_instructions:
        asyncio.run(counted_renders(args.marquees, args.renders))
    elif args.instructions:
        instructions_main(args)
    elif args.child_redis:
        row = asyncio.run(on_redis(args.child_redis, args.marquees, args.rounds, args.updates))
        print(json.dumps(row))
    elif args.redis:
        redis_main(args)
    elif args.child_serve:
        row = asyncio.run(serve_and_measure(args.marquees, args.tabs, args.rate, args.seconds))
        print(json.dumps(row))
    elif args.child_tabs:
        asyncio.run(run_tabs(args.child_tabs, args.tabs, args.pages, args.seconds,
                             args.one_in_flight))  # fmt: skip
    elif args.tabs:
        args.rounds = args.rounds or 1
        tabs_main(args)
    else:
        asyncio.run(measure(args.marquees, args.rounds or 5))


if __name__ == "__main__":
    main()
