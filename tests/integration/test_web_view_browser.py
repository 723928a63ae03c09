"""The web view in a real browser (Debian's chromium) against a real ``playguard run`` on the lab's
redis-server, running the witness phases on two Marquees, beside a third that no cycle runs on
(not launchable) whose record a hostile hand wrote. One daemon and one browser serve the module.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from redis import Redis as SyncRedis
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By

from playguard_async.coordination.keys import (
    CYCLE_ENDED_CHANNEL,
    cycle_history_key,
    last_cycle_key,
    pause_key,
)
from playguard_async.coordination.pause import Pause
from playguard_async.engine.results import Outcome
from playguard_async.web.fleet_table import NEVER, PAGE_SIZE
from playguard_lab import RedisServer
from tests.support.browser import cell_texts, chromium, mark, not_reloaded
from tests.support.daemon import Daemon, DaemonRunner, marquee_entry, wait_for, witness_lines
from tests.support.fleet_records import write_fleet
from tests.support.page_checks import check_and_picture, screenshot_folder
from tests.support.probes import http_get, start_serving
from tests.support.web_users import basic, write_users

pytestmark = pytest.mark.integration

HOSTILE_REASON = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
HOSTILE_SUBJECT = "<img src=x onerror=alert(3)>"
PAUSE_REASON = "disk replaced <b>today</b>"


@dataclass
class Served:
    daemon: Daemon
    base: str
    runner: DaemonRunner
    store: SyncRedis
    browser: webdriver.Chrome
    shots: Path


def hostile_record(now: float) -> str:
    return json.dumps(
        {
            "marquee": "quiet",
            "cycle": "by-hand",
            "outcome": "failed",
            "phase": "pull_images",
            "reason": HOSTILE_REASON,
            "finished_at": now,
            "duration": 1.0,
            "durations": {"pull_images": 1.0},
            "notices": {
                "pull_images": [
                    {"kind": "failed", "subject": HOSTILE_SUBJECT, "detail": HOSTILE_REASON}
                ]
            },
        }
    )


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
    redis_server: RedisServer,
    require_binary: Callable[[str, str], str],
) -> Iterator[Served]:
    chromium_path = require_binary("chromium", "chromium")
    driver_path = require_binary("chromedriver", "chromium-driver")
    workdir = tmp_path_factory.mktemp("web-view")
    store = SyncRedis.from_url(redis_server.url, socket_timeout=2, socket_connect_timeout=2)
    store.flushall()
    record = hostile_record(time.time())
    store.set(last_cycle_key("quiet"), record)
    store.lpush(cycle_history_key("quiet"), record)
    pause = Pause.taken_now("quiet", PAUSE_REASON, 600.0)
    store.set(pause_key("quiet"), pause.encode(), px=600_000)
    runner = DaemonRunner(workdir, redis_server.url)
    runner.write_inventory(
        ["alpha", "beta", "quiet"],
        lambda name: {
            **marquee_entry(name),
            **({"launchable": False, "mode": "detect"} if name == "quiet" else {}),
        },
    )
    try:
        # A hundred pages from one address (test_a_hundred_open_pages...) is past the caps.
        daemon, base = start_serving(
            runner,
            web_refresh_interval=1.0,
            phase_seconds=0.1,
            web_streams_per_client=200,
            web_streams_total=200,
            # Each page holds its stream and fetches the page beside it: two connections.
            http_connections_per_client=250,
        )
        with chromium(chromium_path, driver_path, workdir / "profile") as browser:
            yield Served(daemon, base, runner, store, browser, workdir)
    finally:
        runner.kill_all()
        store.close()


def outcome_of(browser: webdriver.Chrome, marquee: str) -> str:
    cells = cell_texts(browser, f'tr[data-marquee="{marquee}"] td:nth-child(7)')
    return cells[0] if cells else ""


OUTCOMES = frozenset(outcome.value for outcome in Outcome)

PICTURE_CLASSES = frozenset({"pattern-defs", "key", "health", "strip", "chart", "progress"})
"""The classes of the pages' own pictures (web/pictures.py): any other SVG is not ours."""


def cell_attributes(browser: webdriver.Chrome, css: str, name: str) -> list[str]:
    """Attribute ``name`` of what ``css`` selects (those that have it), read in one script."""
    script = (
        "return [...document.querySelectorAll(arguments[0])]"
        ".filter(e => e.hasAttribute(arguments[1])).map(e => e.getAttribute(arguments[1]));"
    )
    found = browser.execute_script(script, css, name)
    assert isinstance(found, list)
    return [str(value) for value in found]


def recorded_outcome(store: SyncRedis, marquee: str) -> str:
    """The outcome Redis's last record of ``marquee`` holds; ``never`` when there is none."""
    raw = store.get(last_cycle_key(marquee))
    if raw is None:
        return NEVER
    outcome = json.loads(raw)["outcome"]
    assert isinstance(outcome, str), raw
    return outcome


def open_marked(served: Served, path: str) -> webdriver.Chrome:
    """The browser on ``path``, the page marked (``mark``)."""
    served.browser.get(served.base + path)
    mark(served.browser)
    return served.browser


def test_fleet_page_shows_every_marquee_with_its_lock_fences_and_last_outcome(
    served: Served,
) -> None:
    browser = served.browser
    browser.get(served.base + "/")
    wait_for(
        lambda: outcome_of(browser, "alpha") == "ok" and outcome_of(browser, "beta") == "ok",
        timeout=15,
        what="alpha and beta ok on the fleet page, without a reload",
    )
    assert cell_texts(browser, "#fleet tbody tr td:first-child a") == ["alpha", "beta", "quiet"]
    counts = cell_texts(browser, ".counts")[0]
    for count in ("3 Marquees", "ok 2", "failed 1"):
        assert count in counts
    assert cell_texts(browser, "#fleet tbody td:nth-child(2)") == ["apply", "apply", "detect"]
    paused = cell_texts(browser, ".paused")
    assert paused[:2] == ["", ""]
    assert paused[2].startswith("paused by ")
    assert paused[2].endswith(f": {PAUSE_REASON}"), "the reason's markup is text"
    fences = cell_texts(browser, 'tr[data-marquee="alpha"] td:nth-child(6)')[0]
    assert re.fullmatch(r"fence \d+ \(host (\d+|unknown: .+)\)", fences), fences
    health = cell_attributes(browser, "svg.health", "aria-label")
    assert len(health) == 1
    assert "of 3" in health[0], health
    assert "detect" in cell_texts(browser, 'tr[data-marquee="quiet"] .badge-detect')[0]
    assert cell_texts(browser, 'tr[data-marquee="quiet"] .badge-paused')
    browser.save_screenshot(str(served.shots / "fleet.png"))


def test_a_cycle_that_ends_shows_on_the_open_page_within_two_seconds_without_reload(
    served: Served,
) -> None:
    browser = open_marked(served, "/marquee/alpha")
    first = cell_texts(browser, "#history tbody tr:first-child td:first-child")
    seen_at = wait_for(
        lambda: (
            cell_texts(browser, "#history tbody tr:first-child td:first-child") != first
            and time.monotonic()
        ),
        timeout=10,
        what="a new cycle of alpha on its open page",
        interval=0.05,
    )
    assert not_reloaded(browser), "the page was reloaded"
    ended = [
        float(line["t"])
        for line in witness_lines(served.runner.witness_dir)
        if line["marquee"] == "alpha" and line["event"] == "exit" and line["phase"] == "second"
        and float(line["t"]) <= seen_at
    ]  # fmt: skip
    assert ended, "no cycle of alpha ended before it was shown"
    assert seen_at - ended[-1] < 2.0, f"shown {seen_at - ended[-1]:.2f} s after the end"
    assert cell_texts(browser, "#phases tbody td:first-child") == ["first", "second"]
    assert cell_attributes(browser, "main svg.strip, main svg.chart", "aria-label")
    browser.save_screenshot(str(served.shots / "marquee.png"))


def test_a_hostile_reason_and_subject_render_as_inert_text(served: Served) -> None:
    browser = served.browser
    for path in ("/?outcome=failed", "/marquee/quiet"):
        browser.get(served.base + path)
        reasons = cell_texts(browser, ".reason")
        assert HOSTILE_REASON in reasons, (path, reasons)
        assert not browser.find_elements(By.CSS_SELECTOR, "main img, main script")
        assert set(cell_attributes(browser, "main svg", "class")) <= PICTURE_CLASSES
        assert not cell_attributes(browser, "main svg", "onload")
        with pytest.raises(NoAlertPresentException):
            _ = browser.switch_to.alert.text
    assert HOSTILE_SUBJECT in cell_texts(browser, "#phases")[0]


def test_garbage_and_unknown_names_are_plain_4xx(served: Served) -> None:
    for path, status in [
        ("/?sort=%00", 400),
        ("/?page=-3", 400),
        ("/marquee/nobody", 404),
        ("/marquee/%22%3E%3Cimg%3E", 404),
    ]:
        answered, body = http_get(served.base + path)
        assert answered == status, (path, body)
        assert "Traceback" not in body
        assert "<img" not in body


def commands_served(store: SyncRedis) -> int:
    stats: dict[str, Any] = store.info("commandstats")
    return sum(int(stat["calls"]) for stat in stats.values())


async def watch_like_browsers(base: str, clients: int, seconds: float) -> int:
    """``clients`` streams open for ``seconds``, each fetching the page again at each new
    version, as the page's script does; how many pages they fetched."""
    fetched = 0

    async def browser(session: aiohttp.ClientSession) -> None:
        nonlocal fetched
        async with session.get(base + "/events") as stream:
            async for line in stream.content:
                if line.startswith(b"data:"):
                    async with session.get(base + "/") as page:
                        await page.read()
                    fetched += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.ensure_future(browser(session)) for _ in range(clients)]
        await asyncio.sleep(seconds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return fetched


async def test_a_hundred_open_pages_cost_redis_no_more_than_one(served: Served) -> None:
    window = 4.0
    before = commands_served(served.store)
    one_fetched = await watch_like_browsers(served.base, 1, window)
    one = commands_served(served.store) - before
    before = commands_served(served.store)
    many_fetched = await watch_like_browsers(served.base, 100, window)
    many = commands_served(served.store) - before
    assert one_fetched >= 2, "the page saw no new picture in the window"
    assert many_fetched >= 50 * one_fetched, (one_fetched, many_fetched)
    # The same ticks and cycles run in both windows; a window may hold one cycle more.
    assert many <= one * 1.5 + 40, f"1 page: {one} Redis commands, 100 pages: {many}"


async def test_a_flood_of_cycle_ends_reaches_an_open_stream_at_most_once_a_second(
    served: Served,
) -> None:
    """600 names published on the cycle-end channel in about 3 s, as other replicas' record
    scripts do: each is a read of alpha and a change of the picture, and an open stream hears
    of them (and of the daemon's own cycles) at most once per ``web_update_interval`` (1 s)."""
    versions: list[int] = []
    opened = time.monotonic()
    async with aiohttp.ClientSession() as session, session.get(served.base + "/events") as stream:

        async def read() -> None:
            async for line in stream.content:
                if line.startswith(b"data:"):
                    versions.append(json.loads(line.removeprefix(b"data:"))["version"])

        reading = asyncio.ensure_future(read())
        for _ in range(600):
            served.store.publish(CYCLE_ENDED_CHANNEL, "alpha")
            await asyncio.sleep(0.005)
        await asyncio.sleep(1.5)  # the last changes published when their interval is over
        reading.cancel()
    elapsed = time.monotonic() - opened
    assert len(versions) >= 3, "the stream heard of no change"
    assert len(versions) <= 2 + elapsed / 1.0, (len(versions), elapsed)


@asynccontextmanager
async def stand_in(app: web.Application) -> AsyncIterator[str]:
    """``app`` served on a free loopback port: its base URL."""
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def test_the_page_script_keeps_one_fetch_in_flight_however_fast_versions_come(
    served: Served,
) -> None:
    """The page's script in the browser against a stand-in replica that announces a version
    every 20 ms for 2 s and answers each fetch of the page in 300 ms: one fetch at a time, each
    version announced during one makes a single one more, and the page ends at the last."""
    script = resources.files("playguard_async.web").joinpath("static", "web_view.js")
    state = {"version": 0, "in_flight": 0, "most_in_flight": 0, "fetches": 0}
    announcing = True

    async def page(request: web.Request) -> web.Response:
        state["fetches"] += 1
        state["in_flight"] += 1
        state["most_in_flight"] = max(state["most_in_flight"], state["in_flight"])
        try:
            if state["fetches"] > 1:  # the first is the page's load, the rest are the script's
                await asyncio.sleep(0.3)
            version = state["version"]
            return web.Response(
                content_type="text/html",
                text=f'<!doctype html><html><head><script src="/static/web_view.js" defer>'
                f'</script></head><body data-version="{version}"><p id="live-banner" hidden>'
                f"</p><main><p>{version}</p></main></body></html>",
            )
        finally:
            state["in_flight"] -= 1

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        told = -1
        while announcing or told != state["version"]:
            if told != state["version"]:
                told = state["version"]
                await response.write(f"data: {json.dumps({'version': told})}\n\n".encode())
            await asyncio.sleep(0.005)
        await asyncio.sleep(60)  # held open, as a replica does; cancelled at clean-up
        return response

    async def static(request: web.Request) -> web.Response:
        return web.Response(body=script.read_bytes(), content_type="text/javascript")

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/events", events)
    app.router.add_get("/static/web_view.js", static)
    browser = served.browser
    async with stand_in(app) as base:
        await asyncio.to_thread(browser.get, base + "/")
        started = time.monotonic()
        for _ in range(100):
            state["version"] += 1
            await asyncio.sleep(0.02)
        announcing = False
        last = str(state["version"])

        def shown() -> object:
            return browser.execute_script("return document.body.dataset.version;")

        async with asyncio.timeout(5):
            while await asyncio.to_thread(shown) != last:  # noqa: ASYNC110 - the browser's page
                await asyncio.sleep(0.05)
        elapsed = time.monotonic() - started
    assert state["most_in_flight"] == 1, state
    # The load, then one fetch after another, each 300 ms, and one for the last version.
    assert state["fetches"] <= 1 + elapsed / 0.3 + 1, (state, elapsed)


def test_with_users_set_every_page_and_stream_answers_401_without_one(
    served: Served, tmp_path: Path
) -> None:
    users = write_users(tmp_path / "users", {"ops": ("viewer", "correct horse")})
    daemon, base = start_serving(served.runner, "guarded", web_credential_file=users)
    for path in ("/", "/marquee/alpha", "/events", "/csrf"):
        assert http_get(base + path)[0] == 401, path
    assert http_get(base + "/healthz")[0] == 200
    browser = served.browser
    browser.get(base + "/")
    assert not browser.find_elements(By.ID, "fleet"), "a fleet table without the credential"
    # With it (sent on every request, the stream's included), the page and its stream work.
    browser.execute_cdp_cmd("Network.enable", {})
    header = {"Authorization": basic("ops", "correct horse")}
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": header})
    try:
        browser.get(base + "/")
        assert cell_texts(browser, "#fleet tbody tr td:first-child a") == ["alpha", "beta", "quiet"]
        version = browser.find_element(By.TAG_NAME, "body").get_attribute("data-version")
        wait_for(
            lambda: (
                browser.find_element(By.TAG_NAME, "body").get_attribute("data-version") != version
            ),
            timeout=5,
            what="a new picture over the guarded stream",
        )
    finally:
        browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
    assert served.runner.stop_all([daemon], timeout=10) == {"guarded": 0}


def test_a_replica_restarting_shows_a_banner_and_the_page_comes_back_by_itself(
    served: Served,
) -> None:
    browser = open_marked(served, "/")
    banner = browser.find_element(By.ID, "live-banner")
    address = served.base.removeprefix("http://")
    assert served.runner.stop_all([served.daemon], timeout=10) == {"r1": 0}
    wait_for(banner.is_displayed, timeout=5, what="the banner once the replica is gone")
    served.daemon = served.runner.start(
        "r1", http_address=address, web_refresh_interval=1.0, phase_seconds=0.1
    )
    wait_for(lambda: not banner.is_displayed(), timeout=15, what="the banner gone again")

    # Where the stop landed decides what alpha's record holds (a cycle cut short is rightly
    # `interrupted`, one that ended first `ok`); whatever it holds, the page comes to show it.
    def shown_as_recorded() -> str | None:
        recorded = recorded_outcome(served.store, "alpha")
        return recorded if outcome_of(browser, "alpha") == recorded else None

    shown = wait_for(shown_as_recorded, timeout=15, what="alpha's recorded outcome on the page")
    assert not_reloaded(browser), "the page was reloaded"
    assert shown in {*OUTCOMES, NEVER}, shown


def test_at_a_thousand_marquees_the_pages_draw_the_whole_fleet_and_fifty_cycles(
    served: Served,
) -> None:
    """998 Marquees more, their 50 cycles written straight into Redis as the daemon writes them
    (none of them launchable: no cycle runs on them), some in detect or off, some paused: the
    health bar counts all 1,000, the page's rows have their strips, a Marquee's page draws
    its 50 cycles. Both pages pass the checks of every page (``page_checks``) at this size too,
    and are pictured."""
    names = [f"m{index:04d}" for index in range(998)]
    asyncio.run(write_fleet(served.runner.redis_url, names, 50))
    for name in names[::50]:
        pause = Pause.taken_now(name, "maintenance", 600.0)
        served.store.set(pause_key(name), pause.encode(), px=600_000)

    def entry(name: str) -> Mapping[str, object]:
        if name in ("alpha", "beta"):
            return marquee_entry(name)
        index = int(name.removeprefix("m"))
        mode = "detect" if index % 10 == 3 else "off" if index % 25 == 7 else "apply"
        return {**marquee_entry(name), "launchable": False, "mode": mode}

    served.runner.write_inventory(["alpha", "beta", *names], entry)
    browser = served.browser
    try:
        browser.get(served.base + "/")
        wait_for(
            lambda: (
                "1000 Marquees" in (cell_texts(browser, ".counts") or [""])[0]
                and len(cell_attributes(browser, "#fleet svg.strip", "aria-label"))
                >= PAGE_SIZE - 10
            ),
            timeout=20,
            what="the thousand Marquees and their strips on the fleet page",
        )
        health = cell_attributes(browser, "svg.health", "aria-label")[0]
        assert "of 1000" in health, health
        assert len(cell_texts(browser, "#fleet tbody tr")) == PAGE_SIZE
        assert cell_texts(browser, ".badge-detect")
        assert cell_texts(browser, ".badge-paused")
        folder = screenshot_folder(served.shots)
        check_and_picture(browser, served.base + "/", "Fleet", folder / "web-view-1000.png")
        browser.get(served.base + "/marquee/m0001")
        strip = cell_attributes(browser, "main svg.strip", "aria-label")
        assert len(strip) == 1
        assert strip[0].startswith("Last 50 cycles"), strip
        assert len(browser.find_elements(By.CSS_SELECTOR, "main svg.strip rect:not(.frame)")) == 50
        assert len(cell_attributes(browser, "main svg.chart", "aria-label")) == 2
        check_and_picture(
            browser, served.base + "/marquee/m0001", "m0001", folder / "web-view-marquee-1000.png"
        )
    finally:
        for name in names:
            served.store.delete(last_cycle_key(name), cycle_history_key(name), pause_key(name))
        served.runner.write_inventory(
            ["alpha", "beta", "quiet"],
            lambda name: {
                **marquee_entry(name),
                **({"launchable": False, "mode": "detect"} if name == "quiet" else {}),
            },
        )
