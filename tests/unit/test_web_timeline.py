"""The web view's ``why`` page without servers: its query string, hostile events rendered inert,
and one read per Marquee at a time, served by the real aiohttp application from a timeline set
by hand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

import pytest

from playguard_async.operator.why import NO_CYCLE_RECORD, Event, HostJournal, HostWrite, Timeline
from playguard_async.web.fleet_table import BadQuery
from playguard_async.web.timeline import (
    EVENTS_SHOWN,
    WAITERS_PER_ASKER,
    WAITERS_PER_MARQUEE,
    Asker,
    ShownTimeline,
    TimelineBusy,
    TimelineQuery,
    TimelineReads,
    TimelineUnavailable,
)
from playguard_async.web.view import WebView
from tests.support.web_view import OUTCOMES, picture_of, serving
from tests.unit.test_web_view import hostile_fleet, hostile_story

DAY = 86400.0


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, TimelineQuery(None, "24h", DAY)),
        ({"playground": "", "since": ""}, TimelineQuery(None, "24h", DAY)),
        ({"playground": "web-main"}, TimelineQuery("web-main", "24h", DAY)),
        ({"since": "90s"}, TimelineQuery(None, "90s", 90.0)),
        ({"since": " 1h30m "}, TimelineQuery(None, "1h30m", 5400.0)),
        ({"since": "7d", "playground": "p"}, TimelineQuery("p", "7d", 7 * DAY)),
    ],
)
def test_query_strings_that_parse(params: dict[str, str], expected: TimelineQuery) -> None:
    assert TimelineQuery.parse(params) == expected


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"since": "8d"}, "since"),
        ({"since": "0s"}, "since"),
        ({"since": "-1h"}, "since"),
        ({"since": "yesterday"}, "since"),
        ({"since": "1\u0661h"}, "since"),  # an Arabic-Indic digit
        ({"since": "9" * 10_000}, "since"),
        ({"playground": "a" * 101}, "playground"),
        ({"playground": "web\x1b[2J"}, "playground"),
        ({"playground": "web\nmain"}, "playground"),
        ({"cycle": "x"}, "'cycle'"),
        ({"<script>\x1b": "x"}, "'<script>\\x1b'"),
    ],
)
def test_bad_query_strings_name_the_parameter(params: dict[str, str], named: str) -> None:
    with pytest.raises(BadQuery) as refused:
        TimelineQuery.parse(params)
    assert named in str(refused.value)


HOSTILE_TEXT = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "'><svg onload=alert(3)>",
    "{{ 7*7 }}</li></ol><b>bold</b>",
)
"""What each may be: an actor, a reason, a host's journal line, a kind, a cycle id."""

ESCAPE = "\x1b]0;owned\x07\x1b[2J"


def hostile_events(value: str, now: float) -> list[Event]:
    """``value`` (with a terminal escape) in every text a timeline's event carries."""
    text = ESCAPE + value
    write = HostWrite(now, 9, text, text)
    return [
        Event(now - 3, "change", text, by=text, included_in=text),
        Event(
            now - 2,
            "cycle",
            f"cycle {text} failed: {text}",
            by=text,
            cycle_id=text,
            fence=9,
            outcome=text,
            causes=(text,),
            actions=(text, "meant only"),
            writes=(write,),
            version=text,
            includes=(text,),
        ),
        Event(now - 1, "host write", text, NO_CYCLE_RECORD, text, 9, writes=(write,)),
        Event(now, text, text, by=text),
    ]


class Reader:
    """A timeline reader that hands out ``timeline``, counting its reads and how many overlap."""

    def __init__(self, timeline: Timeline, *, takes: float = 0.0) -> None:
        self.timeline = timeline
        self.takes = takes
        self.asked: list[tuple[str, str | None, float]] = []
        self.at_once = 0
        self.most_at_once = 0
        self.fails = False

    async def __call__(self, name: str, *, playground: str | None, since: float) -> ShownTimeline:
        self.asked.append((name, playground, since))
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            await asyncio.sleep(self.takes)
            if self.fails:
                raise TimelineUnavailable(name)
            return self.timeline
        finally:
            self.at_once -= 1


def view_with(reader: Reader) -> WebView:
    return WebView(
        picture_of(hostile_fleet(), hostile_story()),
        replica="r1",
        outcomes=OUTCOMES,
        stop=asyncio.Event(),
        streams_per_client=2,
        streams_total=3,
        timelines=TimelineReads(reader),
    )


@pytest.mark.parametrize("value", HOSTILE_TEXT)
async def test_hostile_events_render_as_visible_inert_text_without_any_script(value: str) -> None:
    now = time.time()
    told = Timeline("m-0", None, now - DAY, hostile_events(value, now), host_unread=ESCAPE + value)
    async with serving(view_with(Reader(told))) as client:
        response = await client.get("/marquee/m-0/why")
        html = await response.text()

    assert response.status == 200, html
    assert "unsafe-inline" not in response.headers["Content-Security-Policy"]
    assert value not in html
    assert "<script" not in html, "the page has no live updates: it must not read again"
    assert "\x1b" not in html
    assert "\x07" not in html
    assert "\\x1b]0;owned\\x07\\x1b[2J" in html
    assert "&lt;" in html
    assert html.count('class="meant"') == 1, "the action the host did not journal, only"
    assert "meant (not in the host's journal) meant only" in html
    assert f"[{NO_CYCLE_RECORD}; cycle " in html
    assert 'id="host-unread"' in html


async def test_the_page_lists_the_newest_events_and_says_how_many_it_left_out() -> None:
    now = time.time()
    many = [Event(now - i, "pause", f"pause number {i}", by="op@h") for i in range(700, 0, -1)]
    async with serving(view_with(Reader(Timeline("m-0", None, now - DAY, many)))) as client:
        html = await (await client.get("/marquee/m-0/why?since=1d")).text()

    assert html.count('<li class="event"') == EVENTS_SHOWN
    assert "pause number 1<" in html
    assert f"pause number {EVENTS_SHOWN + 1}<" not in html
    assert f"{700 - EVENTS_SHOWN} older events not shown" in html


@pytest.mark.parametrize(
    ("writes", "banner"),
    [
        ([], "Host journal holds no write and no mark of its start: it was emptied"),
        ([HostWrite(1_700_000_300.0, 4, "compose up", None)],
         "Host journal begins at 2023-11-14 22:18:20: it was cut"),
    ],
)  # fmt: skip
async def test_a_cut_journal_and_a_change_whose_reader_is_gone_are_said_on_the_page(
    writes: list[HostWrite], banner: str
) -> None:
    change = Event(1_700_000_100.0, "change", "change 9: playguard.playgrounds web: x changed",
                   "alice", read_by_or_before="c0ffee", change_id=9)  # fmt: skip
    told = Timeline("m-0", None, 1_700_000_000.0, [change], journal=HostJournal(writes, None))
    async with serving(view_with(Reader(told))) as client:
        html = await (await client.get("/marquee/m-0/why")).text()

    assert 'id="journal-cut"' in html
    assert banner in html
    assert "[in cycle c0ffee or one before it, no longer recorded]" in html


async def test_a_change_the_host_journal_names_the_applier_of_says_so_on_the_page() -> None:
    change = Event(1_700_000_100.0, "change", "change 9: playguard.playgrounds web: x changed",
                   "alice", applied_by="c0ffee", change_id=9)  # fmt: skip
    told = Timeline("m-0", None, 1_700_000_000.0, [change])
    async with serving(view_with(Reader(told))) as client:
        html = await (await client.get("/marquee/m-0/why")).text()

    assert "[applied by cycle c0ffee, from the host journal]" in html
    assert "no longer recorded" not in html


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/marquee/m-0/why?since=8d", 400, "since '8d': not a duration"),
        ("/marquee/m-0/why?playground=%1b", 400, "playground must be"),
        ("/marquee/m-0/why?verbose=1", 400, "unknown parameter 'verbose'"),
        ("/marquee/nobody/why", 404, "no such Marquee"),
    ],
)
async def test_bad_parameters_and_unknown_marquees_are_plain_4xx_that_read_nothing(
    path: str, status: int, says: str
) -> None:
    reader = Reader(Timeline("m-0", None, 0.0, []))
    async with serving(view_with(reader)) as client:
        response = await client.get(path)
        text = await response.text()

    assert (response.status, response.content_type) == (status, "text/plain")
    assert says in text
    assert reader.asked == []


async def test_a_timeline_that_cannot_be_read_is_a_503_that_names_no_address() -> None:
    reader = Reader(Timeline("m-0", None, 0.0, []))
    reader.fails = True
    async with serving(view_with(reader)) as client:
        response = await client.get("/marquee/m-0/why")
        text = await response.text()

    assert response.status == 503
    assert text == "timeline unavailable (Redis): try again shortly\n"


async def test_the_same_question_asked_at_once_is_read_once_and_another_waits_its_turn() -> None:
    reader = Reader(Timeline("m-0", "web", 0.0, []), takes=0.3)
    reads = TimelineReads(reader)
    web = TimelineQuery("web", "1h", 3600.0)
    other = TimelineQuery(None, "1h", 3600.0)

    told = await asyncio.gather(
        reads.timeline("m-0", web), reads.timeline("m-0", web), reads.timeline("m-0", other),
        reads.timeline("m-0", web),
    )  # fmt: skip

    assert list(told) == [reader.timeline] * 4
    assert [(name, playground) for name, playground, _ in reader.asked] == [
        ("m-0", "web"), ("m-0", None),
    ], "the last asker shares the first read, under way when it asked"  # fmt: skip
    assert reader.most_at_once == 1
    assert reads.under_way == 0


async def test_a_read_goes_on_for_the_others_when_its_first_asker_leaves() -> None:
    reader = Reader(Timeline("m-0", None, 0.0, []), takes=0.3)
    reads = TimelineReads(reader)
    query = TimelineQuery(None, "24h", DAY)
    first = asyncio.ensure_future(reads.timeline("m-0", query))
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(reads.timeline("m-0", query))
    await asyncio.sleep(0.05)
    first.cancel()

    assert await second is reader.timeline
    assert len(reader.asked) == 1


async def outcome(reads: TimelineReads, name: str, query: TimelineQuery, asker: str) -> str:
    try:
        await reads.timeline(name, query, Asker(asker))
    except TimelineBusy as exc:
        return exc.why
    return "read"


def since(hours: int) -> TimelineQuery:
    return TimelineQuery(None, f"{hours}h", hours * 3600.0)


async def test_waiters_are_bounded_per_marquee_and_per_asker() -> None:
    reader = Reader(Timeline("m-0", None, 0.0, []), takes=0.05)
    reads = TimelineReads(reader)
    many = WAITERS_PER_MARQUEE + 4
    on_one = await asyncio.gather(
        *(outcome(reads, "m-0", since(hours), f"user-{hours}") for hours in range(1, many + 1))
    )
    assert on_one.count("read") == WAITERS_PER_MARQUEE
    assert on_one.count("busy") == many - WAITERS_PER_MARQUEE
    by_one = await asyncio.gather(
        *(outcome(reads, f"m-{n}", since(1), "greedy") for n in range(WAITERS_PER_ASKER + 3))
    )
    assert by_one.count("read") == WAITERS_PER_ASKER
    assert by_one.count("busy") == 3
    assert reads.under_way == 0
    assert await outcome(reads, "m-0", since(2), "greedy") == "read", "nothing left counted"


async def test_a_question_whose_asker_left_before_its_turn_reads_nothing() -> None:
    reader = Reader(Timeline("m-0", None, 0.0, []), takes=0.2)
    reads = TimelineReads(reader)
    first = asyncio.ensure_future(reads.timeline("m-0", since(1)))
    await asyncio.sleep(0.05)
    left = Asker("gone", lambda: False)
    told = list(await asyncio.gather(first, outcome_of(reads.timeline("m-0", since(2), left))))
    assert told == [reader.timeline, "gone"]
    assert len(reader.asked) == 1, "only the first question was read"


async def outcome_of(asking: Awaitable[object]) -> object:
    try:
        return await asking
    except TimelineBusy as exc:
        return exc.why


async def test_many_questions_sent_and_hung_up_on_leave_the_next_one_answered_soon() -> None:
    reader = Reader(Timeline("m-0", None, 0.0, []), takes=0.1)
    async with serving(view_with(reader)) as client:
        port = client.make_url("").port
        for hours in range(1, 201):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            target = f"/marquee/m-0/why?since={hours}h"
            writer.write(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        response = await client.get("/marquee/m-0/why?since=3d")
        assert response.status == 200
    assert len(reader.asked) <= 1 + WAITERS_PER_MARQUEE + 1
