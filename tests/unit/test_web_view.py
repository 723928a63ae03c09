"""The web view without a browser: credentials, query strings, paging and sorting, and hostile
values rendered as text, served by the real aiohttp application from a picture set by hand."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from playguard_async.coordination.lock import Holder, LockState
from playguard_async.coordination.marquee_reads import LastCycle, MarqueeStatus, MarqueeStory
from playguard_async.service.endpoints import application
from playguard_async.service.fleet_picture import FleetPicture, Listed
from playguard_async.service.fleet_table import (
    PAGE_SIZE,
    BadQuery,
    FleetQuery,
    fleet_page,
)
from playguard_async.service.http_guard import HostRule, HttpGuard
from playguard_async.service.liveness import Liveness
from playguard_async.service.web_auth import admits, offered_secret
from playguard_async.service.web_view import WebView
from playguard_async.settings import SettingsError, load_settings

OUTCOMES = ("ok", "failed", "locked", "unreachable")
HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "'><svg onload=alert(3)>",
    "{{ 7*7 }}</td></tr></table><b>bold</b>",
)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("header", "offered"),
    [
        (None, None),
        ("", None),
        ("Bearer s3cret", b"s3cret"),
        ("bearer   s3cret ", b"s3cret"),
        ("Bearer", None),
        (basic("anyone", "s3cret"), b"s3cret"),
        (basic("anyone", "pa:ss"), b"pa:ss"),
        (basic("anyone", ""), None),
        ("Basic !!!notbase64", None),
        ("Basic " + base64.b64encode(b"no-colon").decode(), None),
        ("Basic " + base64.b64encode(b"u:\xff\xfe").decode(), None),
        ("Digest s3cret", None),
    ],
)
def test_offered_secret_reads_bearer_and_basic_and_refuses_the_rest(
    header: str | None, offered: bytes | None
) -> None:
    assert offered_secret(header) == offered


@pytest.mark.parametrize(
    ("header", "admitted"),
    [
        ("Bearer s3cret", True),
        (basic("x", "s3cret"), True),
        ("Bearer s3cre", False),
        ("Bearer s3cret2", False),
        ("Bearer S3CRET", False),
        (None, False),
    ],
)
def test_admits_only_the_exact_credential(header: str | None, admitted: bool) -> None:
    assert admits("s3cret", header) is admitted


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
    assert first.pages == 5
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


class StubRecords:
    """No Redis: the unit tests set the picture by hand."""


def picture_of(statuses: list[MarqueeStatus], story: MarqueeStory | None = None) -> FleetPicture:
    async def told(name: str) -> MarqueeStory:
        assert story is not None
        return story

    listed = [Listed(status.name, status.launchable, status.mode) for status in statuses]
    picture = FleetPicture(
        StubRecords(),  # type: ignore[arg-type]
        lambda: listed,
        interval=60.0,
        tell_story=told,
    )
    picture.statuses = {status.name: status for status in statuses}
    return picture


@pytest.fixture
async def served(request: pytest.FixtureRequest) -> AsyncIterator[TestClient[Any, Any]]:
    picture, credential = request.param
    view = WebView(picture, replica="r1", outcomes=OUTCOMES, stop=asyncio.Event())

    async def metrics(request: Any) -> Any:
        raise AssertionError("not asked")

    app = application(
        liveness=Liveness(interval=1.0, last_tick=time.monotonic, draining=lambda: False),
        ready=lambda: asyncio.sleep(0, True),
        ready_timeout=1.0,
        metrics=metrics,
        guard=HttpGuard(HostRule.bound_to("127.0.0.1"), credential=credential),
        web_view=view,
    )
    async with TestClient(TestServer(app)) as client:
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


@pytest.mark.parametrize("served", [(picture_of(hostile_fleet()), "s3cret")], indirect=True)
async def test_with_a_credential_every_page_and_stream_asks_for_it_but_probes_do_not(
    served: TestClient[Any, Any],
) -> None:
    for path in ("/", "/marquee/m-0", "/events", "/static/web_view.js"):
        refused = await served.get(path, headers={"Authorization": "Bearer wrong"})
        assert refused.status == 401
        assert refused.headers["WWW-Authenticate"].startswith("Basic ")
        assert (await served.get(path)).status == 401
    admitted = await served.get("/", headers={"Authorization": basic("ops", "s3cret")})
    assert admitted.status == 200
    assert (await served.get("/healthz")).status == 200


def test_beyond_loopback_the_web_view_needs_a_credential(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"beyond loopback.*web_credential_file"):
        load_settings(http_address="0.0.0.0:9464")
    assert load_settings(http_address="0.0.0.0:9464", web_view=False).web_view is False
    assert load_settings(http_address="127.0.0.2:0").web_credential() is None
    assert load_settings(http_address="localhost:0").web_credential() is None
    secret = tmp_path / "credential"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    settings = load_settings(http_address="[::]:9464", web_credential_file=secret)
    assert settings.web_credential() == "s3cret"
    secret.write_text("\n")
    with pytest.raises(SettingsError, match="one non-empty line"):
        settings.web_credential()
    with pytest.raises(SettingsError, match="absent"):
        load_settings(web_credential_file=tmp_path / "absent").web_credential()
