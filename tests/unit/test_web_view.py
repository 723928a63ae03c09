"""The web view without a browser: credentials, query strings, paging and sorting, and hostile
values rendered as text, served by the real aiohttp application from a picture set by hand."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import jinja2
import pytest
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from playguard_async.coordination.lock_record import Holder
from playguard_async.coordination.lock_state import LockState
from playguard_async.coordination.marquee_reads import (
    LastCycle,
    MarqueeStatus,
    MarqueeStory,
    PlaygroundRevisions,
    WantedPlayground,
)
from playguard_async.coordination.pause import Pause
from playguard_async.cycle_record import RevisionRecord
from playguard_async.desired_state.rollout_policy import RolloutPolicy, Wave
from playguard_async.phases.rollout_reads import RolloutStanding
from playguard_async.phases.rollout_record import Rollout
from playguard_async.settings import SettingsError, load_settings
from playguard_async.web import fleet_picture
from playguard_async.web.auth import offered_basic
from playguard_async.web.fleet_picture import FleetPicture
from playguard_async.web.fleet_table import (
    PAGE_SIZE,
    BadQuery,
    FleetQuery,
    FleetRows,
    fleet_page,
    fleet_rows,
)
from playguard_async.web.view import PAGES_KEPT, RenderedPages, WebView
from tests.support.web_users import auth_of, basic
from tests.support.web_view import OUTCOMES, picture_of, serving, view_of

HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "'><svg onload=alert(3)>",
    "{{ 7*7 }}</td></tr></table><b>bold</b>",
)


@pytest.mark.parametrize(
    ("header", "offered"),
    [
        (None, None),
        ("", None),
        ("Bearer s3cret", None),
        (basic("anyone", "s3cret"), ("anyone", "s3cret")),
        (basic("anyone", "pa:ss"), ("anyone", "pa:ss")),
        (basic("anyone", ""), None),
        (basic("", "s3cret"), None),
        ("Basic !!!notbase64", None),
        ("Basic " + base64.b64encode(b"no-colon").decode(), None),
        ("Basic " + base64.b64encode(b"u:\xff\xfe").decode(), None),
        ("Digest s3cret", None),
    ],
)
def test_offered_basic_reads_user_and_password_and_refuses_the_rest(
    header: str | None, offered: tuple[str, str] | None
) -> None:
    assert offered_basic(header) == offered


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, FleetQuery()),
        ({"sort": "age", "order": "desc"}, FleetQuery(sort="age", descending=True)),
        ({"outcome": "failed", "name": "edge"}, FleetQuery(outcome="failed", name="edge")),
        ({"outcome": "never", "page": "3"}, FleetQuery(outcome="never", page=3)),
        ({"outcome": "", "name": "", "page": ""}, FleetQuery()),
    ],
)
def test_query_strings_that_parse(params: dict[str, str], expected: FleetQuery) -> None:
    assert FleetQuery.parse(params, OUTCOMES) == expected


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"sort": "__class__"}, "sort must be"),
        ({"order": "sideways"}, "order must be"),
        ({"outcome": "<script>"}, "outcome is not"),
        ({"page": "0"}, "page must be"),
        ({"page": "-1"}, "page must be"),
        ({"page": "1e9"}, "page must be"),
        ({"page": "٣"}, "page must be"),
        ({"page": "99999999999999999999"}, "page must be"),
        ({"name": "x" * 201}, "name must be"),
        ({"name": "a\x00b"}, "name must be"),
        ({"debug": "1"}, "unknown parameter 'debug'"),
    ],
)
def test_garbage_query_strings_are_bad_queries(params: dict[str, str], why: str) -> None:
    with pytest.raises(BadQuery, match=why):
        FleetQuery.parse(params, OUTCOMES)


def last(outcome: str, *, finished_at: float, **fields: Any) -> LastCycle:
    values: dict[str, Any] = {
        "cycle": "c1", "outcome": outcome, "phase": None, "reason": None, "fence": 3,
        "host_fence": 3, "finished_at": finished_at, "duration": 1.5, "actions": 0,
        "drift": {}, "branch_gone": {}, "failed": [],
    }  # fmt: skip
    values.update(fields)
    return LastCycle(**values)


def fleet_of(count: int, now: float) -> list[MarqueeStatus]:
    outcomes = ("ok", "failed", "unreachable")
    return [
        MarqueeStatus(
            f"m{index:05d}",
            True,
            None,
            None if index % 7 == 0 else last(outcomes[index % 3], finished_at=now - index),
        )
        for index in range(count)
    ]


def test_paging_filters_and_sorts_over_the_whole_fleet() -> None:
    now = time.time()
    statuses = fleet_of(1000, now)
    first = fleet_page(statuses, FleetQuery(), now)
    assert [row.name for row in first.rows[:2]] == ["m00000", "m00001"]
    assert len(first.rows) == PAGE_SIZE
    assert first.pages == 1000 // PAGE_SIZE
    assert first.total == 1000
    assert sum(first.counts.values()) == 1000
    assert first.counts["never"] == 143
    failed = fleet_page(statuses, FleetQuery(outcome="failed", sort="age"), now)
    assert {row.outcome for row in failed.rows} == {"failed"}
    ages = [row.age or 0.0 for row in failed.rows]
    assert ages == sorted(ages)
    past_the_end = fleet_page(statuses, FleetQuery(name="m0099", page=40), now)
    assert past_the_end.page == 1
    assert [row.name for row in past_the_end.rows] == [f"m0099{digit}" for digit in range(10)]
    newest_last = fleet_page(statuses, FleetQuery(sort="age", descending=True), now)
    assert newest_last.rows[0].age is None  # never ran: no age, kept apart from the real ones


@pytest.fixture
async def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[TestClient[Any, Any]]:
    picture, users = request.param
    auth = None if users is None else auth_of(tmp_path / "users", users)
    async with serving(view_of(picture, auth=auth)) as client:
        yield client


def hostile_fleet() -> list[MarqueeStatus]:
    now = time.time()
    holder = Holder("t", HOSTILE[1], HOSTILE[2], 1, "now")
    return [
        MarqueeStatus(
            f"m-{index}",
            True,
            LockState("lock", holder, 5, 9.0, b"{}") if index == 0 else None,
            last("failed", finished_at=now, reason=value, failed=[f"pull: {value}"]),
        )
        for index, value in enumerate(HOSTILE)
    ]


def hostile_story() -> MarqueeStory:
    now = time.time()
    value = HOSTILE[1]
    cycle = last("failed", finished_at=now, reason=HOSTILE[0], drift={value: [value]})
    return MarqueeStory(
        name="m-0",
        lock=None,
        fence_counter=4,
        last=cycle,
        steps=[],
        history=[cycle],
        last_good={value: value},
        revisions={
            value: PlaygroundRevisions(
                {
                    "commit": "a" * 40,
                    "images": {"app": "r@sha256:" + "b" * 64},
                    "env": "-",
                    "override": "c" * 64,
                },
                None,
                value,
            )
        },
        wanted=(
            WantedPlayground(
                value,
                value,
                value,
                value,
                "stopped",
                images=(value,),
                chats=((value, value, value),),
            ),
        ),
    )


@pytest.mark.parametrize(
    "served", [(picture_of(hostile_fleet(), hostile_story()), None)], indirect=True
)
async def test_hostile_values_render_as_text_under_a_policy_without_inline_script(
    served: TestClient[Any, Any],
) -> None:
    for path in ("/", "/marquee/m-0"):
        response = await served.get(path)
        html = await response.text()
        assert response.status == 200, html
        csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        for value in HOSTILE:
            assert value not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in html
        assert html.count("<script") == 1  # the package's own, by src


def with_hostile_rollouts(picture: FleetPicture) -> FleetPicture:
    """``picture`` showing a halted rollout per hostile value: in its scope's place (a scope
    from Redis is outside input) and in why it halted."""
    policy = RolloutPolicy(waves=[1, "100%"])
    picture.rollouts = [
        RolloutStanding(
            replace(
                Rollout.open(value, "a" * 64, None, policy, (Wave("0", 1), Wave("~", 1)), now=1e9),
                status="halted",
                why=value,
            ),
            {0: 1},
        )
        for value in HOSTILE
    ]
    return picture


@pytest.mark.parametrize(
    "served", [(with_hostile_rollouts(picture_of(hostile_fleet())), None)], indirect=True
)
async def test_unfinished_rollouts_are_rows_of_the_fleet_page_as_text(
    served: TestClient[Any, Any],
) -> None:
    response = await served.get("/")
    html = await response.text()
    assert response.status == 200, html
    assert html.count('class="rollout-halted"') == len(HOSTILE)
    assert html.count('<svg class="progress"') == len(HOSTILE)
    # Each said three times: the picture's label and title, and the words beside it.
    assert html.count("wave 1 of 2, 1 of 1 verified healthy") == 3 * len(HOSTILE)
    for value in HOSTILE:
        assert value not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def recorded(cycle: LastCycle) -> dict[str, Any]:
    """``cycle`` as the engine's record holds what a strip draws of it."""
    return {
        "cycle": cycle.cycle, "outcome": cycle.outcome, "finished_at": cycle.finished_at,
        "duration": cycle.duration, "actions": {}, "dry_run": cycle.dry_run,
    }  # fmt: skip


def pictured_fleet() -> FleetPicture:
    statuses = fleet_of(450, time.time())
    histories = {
        status.name: [recorded(status.last)] * 3 for status in statuses if status.last is not None
    }
    return picture_of(statuses, histories=histories)


async def test_the_health_bar_counts_every_marquee_and_only_the_pages_rows_get_strips() -> None:
    """450 Marquees, PAGE_SIZE a page: the health bar says all 450; the page's rows have a strip
    each but those that never ran, read once each, and no other Marquee's history is read."""
    picture = pictured_fleet()
    async with serving(view_of(picture)) as served:
        html = await (await served.get("/")).text()
        await served.get("/?sort=name")  # another page of the same rows at the same version
    health = re.search(r'<svg class="health"[^>]*aria-label="([^"]*)"', html)
    assert health is not None
    assert "ok: 128 of 450" in health.group(1)
    assert "never: 65 of 450" in health.group(1)
    reads = picture.records.reads  # type: ignore[attr-defined]
    first_page = {f"m{index:05d}" for index in range(PAGE_SIZE) if index % 7}
    assert set(reads) == first_page
    assert set(reads.values()) == {1}
    assert html.count('<svg class="strip"') == len(first_page)
    assert html.count("<script") == 1, "pictures need no script"
    assert 'style="' not in html


async def test_a_row_with_held_playgrounds_wears_a_held_badge() -> None:
    now = time.time()
    held = PlaygroundRevisions(None, None, "held by rollout web@main: wave 2 not started")
    statuses = [
        replace(fleet_of(2, now)[1], revisions={"web": held, "api": held}, mode="detect"),
        replace(fleet_of(2, now)[1], name="m-free", revisions={"web": replace(held, pinned=None)}),
    ]
    async with serving(view_of(picture_of(statuses))) as served:
        html = await (await served.get("/")).text()
    rows = re.findall(r'<tr data-marquee="([^"]+)">', html)
    assert rows == ["m-free", "m00001"]
    assert html.count("⚓ 2 held") == 1
    assert "held</span>" not in html.split('data-marquee="m-free"')[1].split("</td>")[0]
    assert '<span class="badge badge-detect">◌ detect</span>' in html


def pictured_story() -> MarqueeStory:
    """60 cycles, newest first: one of each hostile outcome, a NaN and a huge duration."""
    cycles = [
        last(value, finished_at=1e9, cycle=f"h{index}", duration=math.nan)
        for index, value in enumerate(HOSTILE)
    ]
    cycles += [last("ok", finished_at=1e9, cycle="huge", duration=1e300, actions=10**9)]
    cycles += [last("ok", finished_at=1e9, cycle=f"c{index}") for index in range(55)]
    return replace(hostile_story(), history=cycles)


@pytest.mark.parametrize(
    "served", [(picture_of(hostile_fleet(), pictured_story()), None)], indirect=True
)
async def test_the_marquee_page_draws_its_last_fifty_cycles_and_lists_twenty(
    served: TestClient[Any, Any],
) -> None:
    html = await (await served.get("/marquee/m-0")).text()
    for kind in ("strip", "chart"):
        assert f'<svg class="{kind}"' in html
    assert html.count('<svg class="chart"') == 2, "duration and actions"
    assert "Last 50 cycles" in html
    assert "unknown time" in html
    assert "a day or more" in html
    for value in HOSTILE:
        assert value not in html
    history = html[html.index('<table id="history">') :]
    assert history.count("<tr") == 1 + 20
    assert 'style="' not in html


@pytest.mark.parametrize("served", [(picture_of(hostile_fleet()), None)], indirect=True)
@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/?sort=__class__", 400),
        ("/?page=abc", 400),
        ("/?outcome=%3Cscript%3E", 400),
        ("/?x=1", 400),
        ("/marquee/nobody", 404),
        ("/marquee/m-0?x=1", 400),
        ("/marquee/%3Cscript%3E", 404),
        ("/static/../settings.py", 404),
        ("/static/web_view.js", 200),
    ],
)
async def test_bad_input_is_a_plain_4xx(
    served: TestClient[Any, Any], path: str, status: int
) -> None:
    response = await served.get(path)
    text = await response.text()
    assert response.status == status, text
    assert "Traceback" not in text


OPS = {"ops": ("viewer", "s3cret")}


@pytest.mark.parametrize("served", [(picture_of(hostile_fleet()), OPS)], indirect=True)
async def test_with_a_credential_every_page_and_stream_asks_for_it_but_probes_do_not(
    served: TestClient[Any, Any],
) -> None:
    admitted = await served.get("/", headers={"Authorization": basic("ops", "s3cret")})
    assert admitted.status == 200
    for path in ("/", "/marquee/m-0", "/events", "/csrf"):
        for wrong in ("Bearer s3cret", basic("ops", "wrong"), basic("nobody", "s3cret")):
            refused = await served.get(path, headers={"Authorization": wrong})
            assert refused.status == 401
            assert refused.headers["WWW-Authenticate"].startswith("Basic ")
        assert (await served.get(path)).status == 401
    page = await served.get("/", headers={"Accept": "text/html"}, allow_redirects=False)
    assert (page.status, page.headers["Location"]) == (303, "/login")
    # Past 5 failed checks a minute from this address nothing is checked, but a pair verified
    # before is still admitted: a neighbour's guesses do not lock a script out.
    still = await served.get("/", headers={"Authorization": basic("ops", "s3cret")})
    assert still.status == 200
    for path in ("/healthz", "/login", "/static/web_view.js"):
        assert (await served.get(path)).status == 200, path


def test_beyond_loopback_the_web_view_needs_users_or_a_proxy(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"beyond loopback.*web_credential_file"):
        load_settings(http_address="0.0.0.0:9464")
    assert load_settings(http_address="0.0.0.0:9464", web_view=False).web_view is False
    assert load_settings(http_address="127.0.0.2:0").web_credential_file is None
    users = tmp_path / "users"
    settings = load_settings(http_address="[::]:9464", web_credential_file=users)
    assert settings.web_credential_file == users
    proxied = load_settings(http_address="[::]:9464", web_trusted_proxies=["127.0.0.1"])
    assert proxied.web_trusted_proxies == ("127.0.0.1",)
    with pytest.raises(SettingsError, match="not an address or CIDR"):
        load_settings(web_trusted_proxies=["proxy.example"])
    with pytest.raises(SettingsError, match="'root' is not one of viewer, operator, admin"):
        load_settings(web_proxy_group_roles={"ops": "root"})


def test_a_kept_page_serves_its_version_only_while_fresh() -> None:
    pages = RenderedPages(fresh_for=60.0)
    pages.keep("/", 3, b"three")
    assert pages.get("/", 3) == b"three"
    assert pages.get("/", 4) is None, "a newer version is rendered again"
    assert pages.get("/?sort=age", 3) is None
    pages.keep("/", 4, b"four")
    pages.keep("/marquee/m", 3, b"story read before version 4")
    assert pages.get("/marquee/m", 3) is None, "an older version's page is not kept"
    assert pages.get("/", 3) is None
    for index in range(PAGES_KEPT + 10):
        pages.keep(f"/?page={index}", 4, b"x")
    assert sum(pages.get(f"/?page={index}", 4) is not None for index in range(PAGES_KEPT + 10)) == (
        PAGES_KEPT
    )
    assert pages.get(f"/?page={PAGES_KEPT + 9}", 4) == b"x", "the newest are the ones kept"
    brief = RenderedPages(fresh_for=0.01)
    brief.keep("/", 1, b"ages as of now")
    time.sleep(0.02)
    assert brief.get("/", 1) is None, "a page's ages are rendered again once it is not fresh"


@dataclass
class Live:
    """A picture whose loop runs on Marquees read from memory, served on loopback."""

    client: TestClient[Any, Any]
    picture: FleetPicture
    view: WebView
    ended: Callable[[str], None]
    """What a name published by another replica's record script calls."""
    reads: Counter[str]
    told: Counter[str]
    """Cycle ends told per Marquee; a read Marquee's last cycle is named by the count then."""


@asynccontextmanager
async def live_picture(
    monkeypatch: pytest.MonkeyPatch,
    publish_interval: float,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[Live]:
    now = time.time()
    statuses = fleet_of(50, now)
    reads: Counter[str] = Counter()
    told: Counter[str] = Counter()
    followers: list[Callable[[str], None]] = []

    async def read_status(records: Any, name: str, **desired: Any) -> MarqueeStatus:
        reads[name] += 1
        return MarqueeStatus(name, True, None, last("ok", finished_at=now, cycle=str(told[name])))

    async def follow_cycle_ends(
        redis: Any, ended: Callable[[str], None], resumed: Any, stop: asyncio.Event
    ) -> None:
        followers.append(ended)
        await stop.wait()

    def ended(name: str) -> None:
        told[name] += 1
        followers[0](name)

    monkeypatch.setattr(fleet_picture, "read_status", read_status)
    monkeypatch.setattr(fleet_picture, "follow_cycle_ends", follow_cycle_ends)
    picture = picture_of(statuses, publish_interval=publish_interval)
    picture.clock = clock
    view = view_of(picture)
    running = asyncio.ensure_future(picture.run(view.stop))
    try:
        async with serving(view) as client:
            await until(lambda: picture.version >= 1 and bool(followers), "the first read")
            yield Live(client, picture, view, ended, reads, told)
    finally:
        view.stop.set()
        await running


@pytest.fixture
async def live(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Live]:
    async with live_picture(monkeypatch, getattr(request, "param", 0.2)) as running:
        yield running


def cycles_shown(picture: FleetPicture) -> dict[str, str]:
    return {
        name: status.last.cycle
        for name, status in picture.statuses.items()
        if status.last is not None
    }


async def test_a_flood_of_cycle_ends_is_read_and_published_once_per_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """100 cycle ends a second over 50 Marquees for 10 s of a driven clock: the picture takes
    one version per second, reads each Marquee at most once per version, and the last ends
    are published when their second is over, none lost."""
    now = [0.0]
    async with live_picture(monkeypatch, 1.0, clock=lambda: now[0]) as running:
        picture, started = running.picture, running.picture.version
        running.reads.clear()
        for step in range(1, 1001):
            now[0] = step / 100
            running.ended(f"m{step % 50:05d}")
            await asyncio.sleep(0.001)  # the loop's turn: it may take any number of them
        published = picture.version - started
        assert 1 <= published <= 10, published
        now[0] += 1.0
        running.ended("m00000")  # wakes the loop past the interval
        told = {name: str(count) for name, count in running.told.items()}

        def caught_up() -> bool:
            if cycles_shown(picture) == told:
                return True
            # A read under way when the flood ended publishes first and holds this last end
            # for one more interval of the driven clock.
            now[0] += 1.0
            return False

        await until(caught_up, "the last ends published", timeout=10.0)
        await asyncio.sleep(0.05)
        final = picture.version
        assert started + published + 1 <= final <= started + published + 2, (published, final)
        await asyncio.sleep(0.05)
        assert picture.version == final, "nothing more to publish"
        # Counted once every read has become a version: during the flood a read may be under way
        # for a version not taken yet, wherever the loop's turns fall on a loaded machine.
        reads = sum(running.reads.values())
        assert reads <= 50 * (final - started), f"a Marquee read once per version: {reads}"


async def events_of(stream: aiohttp.ClientResponse, versions: list[int]) -> None:
    async for line in stream.content:
        if line.startswith(b"data:"):
            versions.append(json.loads(line.removeprefix(b"data:"))["version"])


async def until(probe: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not probe():  # noqa: ASYNC110 - polls state the server changes
            await asyncio.sleep(0.01)


async def test_a_flood_of_cycle_ends_reaches_a_stream_at_most_once_per_interval(
    live: Live,
) -> None:
    interval = live.picture.publish_interval
    versions: list[int] = []
    opened = time.monotonic()
    async with live.client.get("/events") as stream:
        reading = asyncio.ensure_future(events_of(stream, versions))
        for bump in range(600):
            live.ended(f"m{bump % 50:05d}")
            await asyncio.sleep(0.001)
        await until(
            lambda: bool(versions) and versions[-1] == live.picture.version,
            "the stream at the picture's last version",
        )
        await asyncio.sleep(interval * 1.5)  # nothing held: the version stays
        reading.cancel()
    elapsed = time.monotonic() - opened
    assert versions[-1] == live.picture.version
    assert sum(live.reads.values()) >= 100 + 50, "the flood changed the picture many times"
    # One event at once, then one per publication, and publications are interval apart.
    assert len(versions) <= 2 + elapsed / interval, (len(versions), elapsed)
    assert versions == sorted(set(versions))


@pytest.mark.parametrize("live", [60.0], indirect=True)
async def test_the_pages_a_version_wakes_are_rendered_once_each(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten tabs on the fleet page and five sorted by age, at one version: the rows built once,
    each of the two pages rendered once."""
    rendered: Counter[str] = Counter()
    environment = live.view.environment
    template = environment.get_template

    def counted(name: str, *more: Any) -> jinja2.Template:
        rendered[name] += 1
        return template(name, *more)

    def rows(statuses: Any, now: float) -> FleetRows:
        rendered["rows"] += 1
        return fleet_rows(statuses, now)

    monkeypatch.setattr(environment, "get_template", counted)
    monkeypatch.setattr("playguard_async.web.view.fleet_rows", rows)

    async def fetch(path: str) -> str:
        async with live.client.get(path) as response:
            assert response.status == 200
            return await response.text()

    tabs = await asyncio.gather(*(fetch("/") for _ in range(10)))
    assert len(set(tabs)) == 1
    sorted_by_age = await asyncio.gather(*(fetch("/?sort=age") for _ in range(5)))
    assert len(set(sorted_by_age)) == 1
    pages = {name: rendered[name] for name in ("fleet.html", "base.html", "rows")}
    assert pages == {"fleet.html": 2, "base.html": 2, "rows": 1}
    assert set(rendered.values()) == {1, 2}, "each partial once per page rendered"
    assert (await live.client.get("/?sort=__class__")).status == 400, "refusals not kept"


async def test_streams_past_either_cap_are_refused_and_a_closed_one_frees_its_place() -> None:
    """2 streams per client address, 3 in all; a second client connects from 127.0.0.2
    (loopback answers any 127/8 address)."""
    view = view_of(picture_of(hostile_fleet()), per_client=2, total=3)
    async with serving(view) as served:
        await refuse_and_free(view, served)


async def refuse_and_free(view: WebView, served: TestClient[Any, Any]) -> None:
    events = served.make_url("/events")
    other = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0)))
    opened: list[aiohttp.ClientResponse] = []

    async def open_stream(session: aiohttp.ClientSession) -> aiohttp.ClientResponse:
        response = await session.get(events)
        if response.status == 200:
            assert await response.content.readline() == b"retry: 1000\n"
            opened.append(response)
        return response

    try:
        with capture_logs() as logs:
            for _ in range(2):
                assert (await open_stream(served.session)).status == 200
            past_client = await open_stream(served.session)
            assert past_client.status == 429
            assert past_client.headers["Retry-After"] == "30"
            assert "web_streams_per_client" in await past_client.text()
            assert (await open_stream(other)).status == 200
            past_total = await open_stream(other)
            assert past_total.status == 503
            assert past_total.headers["Retry-After"] == "30"
            assert "web_streams_total" in await past_total.text()
            assert (await open_stream(served.session)).status == 503
        refusals = [line for line in logs if line["event"] == "web.stream_refused"]
        assert len(refusals) == 1, "one line for the three refusals"
        assert refusals[0]["client"] == "127.0.0.1"
        assert view.streams.open == {"127.0.0.1": 2, "127.0.0.2": 1}, "refusals hold nothing"

        opened.pop(0).close()  # a browser tab closed: its place is free within a second
        admitted: list[int] = []

        async def reopened() -> bool:
            response = await open_stream(served.session)
            admitted.append(response.status)
            return response.status == 200

        async with asyncio.timeout(5):
            while not await reopened():  # noqa: ASYNC110 - the server frees the place
                await asyncio.sleep(0.1)
        assert set(admitted) <= {503, 200}
    finally:
        for response in opened:
            response.close()
        await other.close()
    await until(lambda: not view.streams.open, "every place given back")
    assert view.streams.in_all == 0


PAUSE = Pause("m1", "otto", "vm", "disk", 1.0, 2e9)
HOLD = {"web": PlaygroundRevisions(None, None, "pinned at abc by otto")}


@pytest.mark.parametrize(
    ("outcome", "fields", "standing"),
    [
        ("ok", {}, "ok"),
        ("ok", {"pause": PAUSE}, "paused"),
        ("ok", {"revisions": HOLD}, "held"),
        ("ok", {"mode": "detect"}, "detect"),
        ("ok", {"mode": "off"}, "off"),
        ("ok", {"pause": PAUSE, "revisions": HOLD, "mode": "detect"}, "paused"),
        ("ok", {"revisions": HOLD, "mode": "off"}, "held"),
        ("phase_failed", {"pause": PAUSE, "revisions": HOLD, "mode": "detect"}, "phase_failed"),
        ("unreachable", {}, "unreachable"),
        ("locked", {"mode": "detect"}, "detect"),
        ("<b>garbage</b>", {}, "<b>garbage</b>"),
        (None, {"pause": PAUSE}, "paused"),
        (None, {}, "never"),
    ],
)
def test_the_health_bar_counts_a_marquee_by_what_keeps_it_from_its_desired_state(
    outcome: str | None, fields: dict[str, Any], standing: str
) -> None:
    cycle = None if outcome is None else last(outcome, finished_at=1.0)
    status = MarqueeStatus("m1", True, None, cycle, **fields)
    fleet = fleet_rows([status], now=2.0)
    assert fleet.standing == {standing: 1}
    assert fleet.counts == {outcome or "never": 1}


async def test_a_paused_marquee_whose_last_cycle_was_ok_is_not_counted_ok() -> None:
    now = time.time()
    statuses = [
        MarqueeStatus("a", True, None, last("ok", finished_at=now)),
        MarqueeStatus("b", True, None, last("ok", finished_at=now), pause=PAUSE),
    ]
    async with serving(view_of(picture_of(statuses))) as served:
        html = await (await served.get("/")).text()
    health = re.search(r'<svg class="health"[^>]*aria-label="([^"]*)"', html)
    assert health is not None
    assert health.group(1) == "Fleet health: ✓ ok: 1 of 2 (50.0%); ‖ paused: 1 of 2 (50.0%)"


async def test_the_marquee_page_puts_each_playgrounds_desired_state_beside_what_was_found() -> None:
    now = time.time()
    digest = "r@sha256:" + "b" * 64
    running: RevisionRecord = {"commit": "a" * 40, "images": {"app": digest}, "env": "-",
                               "override": "-"}  # fmt: skip
    cycle = last("ok", finished_at=now, drift={"web-b": ["app: missing"]})
    story = MarqueeStory(
        name="m1", lock=None, fence_counter=1, last=cycle, steps=[], history=[cycle],
        revisions={
            "web-a": PlaygroundRevisions(running, running, None, "pinned at aaaaaaaaaaaa by otto"),
            "gone": PlaygroundRevisions(running, None, None),
        },
        wanted=(
            WantedPlayground("web-a", "web", "https://git.example/web.git", "main", "running",
                             images=("r/app:1",), chats=(("helper", "r/agent:2", "active"),)),
            WantedPlayground("web-b", "web", "https://git.example/web.git", "dev", "running"),
        ),
    )  # fmt: skip
    async with serving(view_of(picture_of(fleet_of(1, now), story))) as served:
        html = await (await served.get("/marquee/m00000")).text()
    a = html.split('id="playground-web-a"')[1].split("</section>")[0]
    b = html.split('id="playground-web-b"')[1].split("</section>")[0]
    assert "✓ as desired when last seen" in a
    assert "⚓ pinned at aaaaaaaaaaaa by otto" in a
    assert digest in a
    assert "r/app:1" in a
    assert "helper (r/agent:2, active)" in a
    assert "✗ differs" in b
    assert "<li>app: missing</li>" in b
    assert "not seen yet" in b
    gone = html.split('id="revisions"')[1].split("</table>")[0]
    assert "Found by the last cycle, not in the desired state now" in gone
    assert ">gone<" in gone
    assert "web-a" not in gone


async def test_a_playground_links_its_repo_and_its_rollout_and_titles_its_whole_commit() -> None:
    """The Playspec's repo is a link when it is a web address (https) and text otherwise; a
    rollout not done of the Playground's scope is a link to its row (and actions) on the fleet
    page; the commit, cut short on the page, is whole in its title, to copy (the desired state
    names no web address for commits)."""
    now = time.time()
    running: RevisionRecord = {"commit": "a" * 40, "images": {}, "env": "-", "override": "-"}
    cycle = last("ok", finished_at=now)
    story = MarqueeStory(
        name="m1", lock=None, fence_counter=1, last=cycle, steps=[], history=[cycle],
        revisions={"web-a": PlaygroundRevisions(running, running, None)},
        wanted=(
            WantedPlayground("web-a", "web", "https://git.example/web.git", "main", "running"),
            WantedPlayground("api-b", "api", "git@git.example:api.git", "main", "running"),
        ),
    )  # fmt: skip
    picture = picture_of(fleet_of(1, now), story)
    policy = RolloutPolicy(waves=[1, "100%"])
    opened = Rollout.open("web@main", "b" * 64, None, policy, (Wave("0", 1), Wave("~", 1)), now=now)
    picture.rollouts = [RolloutStanding(opened, {})]
    async with serving(view_of(picture)) as served:
        html = await (await served.get("/marquee/m00000")).text()
    a = html.split('id="playground-web-a"')[1].split("</section>")[0]
    b = html.split('id="playground-api-b"')[1].split("</section>")[0]
    assert '<a href="https://git.example/web.git" rel="noreferrer">' in a
    assert '<a href="/#rollout-web@main">web@main, not done' in a
    assert f'title="commit {"a" * 40}"' in a
    assert "git@git.example:api.git" in b
    assert "<a href" not in b, "no link to an address that is not a web page, nor a rollout"
