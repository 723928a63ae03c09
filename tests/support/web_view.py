"""The web view served from a picture set by hand, without Redis: what the web view's tests and
the tests of what it shows share."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from playguard_async.coordination.marquee_reads import MarqueeStatus, MarqueeStory
from playguard_async.service.endpoints import application
from playguard_async.service.liveness import Liveness
from playguard_async.web.actions import ActionDesk
from playguard_async.web.auth import WebAuth
from playguard_async.web.fleet_picture import FleetPicture, Listed
from playguard_async.web.http_guard import HostRule, HttpGuard
from playguard_async.web.view import WebView

OUTCOMES = ("ok", "failed", "locked", "unreachable")


class StubRecords:
    """No Redis: the unit tests set the picture by hand (or read it from memory: ``live``);
    each Marquee's history is its last cycle alone (``histories`` may say otherwise)."""

    redis = None

    def __init__(self, histories: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.histories = histories or {}
        self.reads: Counter[str] = Counter()

    async def history(self, marquee: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        self.reads[marquee] += 1
        return self.histories.get(marquee, [])[:limit]


def picture_of(
    statuses: list[MarqueeStatus],
    story: MarqueeStory | None = None,
    *,
    publish_interval: float = 0.2,
    histories: dict[str, list[dict[str, Any]]] | None = None,
) -> FleetPicture:
    async def told(name: str) -> MarqueeStory:
        assert story is not None
        return story

    listed = [Listed(status.name, status.launchable, status.mode) for status in statuses]
    picture = FleetPicture(
        StubRecords(histories),  # type: ignore[arg-type]
        lambda: listed,
        interval=60.0,
        tell_story=told,
        publish_interval=publish_interval,
    )
    picture.statuses = {status.name: status for status in statuses}
    return picture


def view_of(
    picture: FleetPicture,
    *,
    auth: WebAuth | None = None,
    desk: ActionDesk | None = None,
    **caps: int,
) -> WebView:
    return WebView(
        picture,
        replica="r1",
        outcomes=OUTCOMES,
        stop=asyncio.Event(),
        streams_per_client=caps.get("per_client", 2),
        streams_total=caps.get("total", 3),
        auth=auth,
        desk=desk,
    )


def serving(view: WebView) -> TestClient[Any, Any]:
    """The endpoints with ``view`` (behind its users, if it has them), on a real aiohttp server on
    loopback."""

    async def metrics(request: Any) -> Any:
        raise AssertionError("not asked")

    app = application(
        liveness=Liveness(interval=1.0, last_tick=time.monotonic, draining=lambda: False),
        ready=lambda: asyncio.sleep(0, True),
        ready_timeout=1.0,
        metrics=metrics,
        guard=HttpGuard(HostRule.bound_to("127.0.0.1"), auth=view.actions.auth),
        web_view=view,
    )
    return TestClient(TestServer(app, host="127.0.0.1"))
