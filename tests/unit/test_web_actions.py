"""Actions, login and the trusted proxy on a real aiohttp server on loopback, with a desk that
records what it was asked (the CLI's code is tested in the browser test against a real daemon):
the Origin/Referer matrix, the CSRF token of a session and of basic auth, roles, the rate limit,
and what a login's cookie says of itself."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from aiohttp.test_utils import TestClient, make_mocked_request
from structlog.testing import capture_logs

from playguard_async.coordination.marquee_reads import MarqueeStatus
from playguard_async.coordination.pause import Pause
from playguard_async.kits.rate_limit import RateLimit
from playguard_async.web.actions import (
    SHOWN_CHARS,
    SHOWN_LINES,
    ActionRefused,
    rowed,
    same_origin,
)
from playguard_async.web.auth import Refused, TrustedProxy
from playguard_async.web.users import WebUser
from tests.support.web_users import auth_of, basic
from tests.support.web_view import picture_of, serving, view_of

USERS = {
    "vera": ("viewer", "v-pw"),
    "otto": ("operator", "o-pw"),
    "ada": ("admin", "a-pw"),
}


class RecordingDesk:
    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, str], str]] = []

    async def act(self, action: str, form: Mapping[str, str], user: str) -> list[str]:
        self.asked.append((action, dict(form), user))
        if form.get("marquee") == "unknown":
            raise ActionRefused("no marquee named 'unknown'")
        return [f"{action} done by {user}"]


@pytest.mark.parametrize(
    ("headers", "same"),
    [
        ({"Origin": "http://127.0.0.1:9464"}, True),
        ({"Origin": "HTTP://127.0.0.1:9464"}, True),
        ({"Origin": "http://127.0.0.1:9465"}, False),
        ({"Origin": "https://127.0.0.1:9464"}, False),
        ({"Origin": "http://localhost:9464"}, False),
        ({"Origin": "null"}, False),
        ({"Origin": ""}, False),
        ({"Origin": "http://127.0.0.1:9464.evil.example"}, False),
        ({"Referer": "http://127.0.0.1:9464/marquee/m1"}, True),
        ({"Referer": "http://127.0.0.1:9465/"}, False),
        ({"Referer": "http://[::1"}, False),
        ({"Origin": "http://evil.example", "Referer": "http://127.0.0.1:9464/"}, False),
        ({}, False),
    ],
)
def test_origin_or_else_referer_must_be_the_pages_own(headers: dict[str, str], same: bool) -> None:
    request = make_mocked_request("POST", "/action", headers={"Host": "127.0.0.1:9464", **headers})
    assert same_origin(request) is same


@pytest.fixture
async def desk() -> RecordingDesk:
    return RecordingDesk()


@pytest.fixture
async def client(tmp_path: Path, desk: RecordingDesk) -> AsyncIterator[TestClient[Any, Any]]:
    proxy = TrustedProxy(["10.9.0.0/16"], {"ops": "operator"})
    view = view_of(picture_of([]), auth=auth_of(tmp_path / "users", USERS, proxy=proxy), desk=desk)
    async with serving(view) as served:
        yield served


def origin(client: TestClient[Any, Any]) -> str:
    return str(client.make_url("")).rstrip("/")


async def csrf_of(client: TestClient[Any, Any], user: str) -> str:
    answer = await client.get("/csrf", headers={"Authorization": basic(user, USERS[user][1])})
    assert answer.status == 200
    return (await answer.text()).strip()


async def post_action(
    client: TestClient[Any, Any], user: str, form: dict[str, str], **headers: str
) -> tuple[int, str]:
    answer = await client.post(
        "/action",
        data=form,
        headers={"Authorization": basic(user, USERS[user][1]), **headers},
        allow_redirects=False,
    )
    return answer.status, await answer.text()


async def test_basic_auth_actions_need_origin_csrf_and_the_role(
    client: TestClient[Any, Any], desk: RecordingDesk
) -> None:
    token = await csrf_of(client, "otto")
    own = {"Origin": origin(client)}
    pause = {"action": "pause", "marquee": "m1", "reason": "maintenance"}
    assert await post_action(client, "otto", pause, **own, **{"X-CSRF-Token": token}) == (
        200,
        "pause done by otto\n",
    )
    assert await post_action(client, "otto", {**pause, "csrf": token}, **own) == (
        200,
        "pause done by otto\n",
    )
    refusals = [
        await post_action(client, "otto", pause, **own),  # no token
        await post_action(client, "otto", {**pause, "csrf": token + "0"}, **own),
        await post_action(client, "otto", {**pause, "csrf": await csrf_of(client, "ada")}, **own),
        await post_action(client, "otto", {**pause, "csrf": token}),  # no Origin
        await post_action(client, "otto", {**pause, "csrf": token}, Origin="http://evil.example"),
        await post_action(client, "vera", {**pause, "csrf": await csrf_of(client, "vera")}, **own),
        await post_action(
            client, "otto", {"action": "unlock", "marquee": "m1", "csrf": token}, **own
        ),
    ]
    assert [status for status, _ in refusals] == [403] * 7
    assert "needs the role operator" in refusals[5][1]
    assert "needs the role admin" in refusals[6][1]
    ada = await csrf_of(client, "ada")
    unlock = {"action": "unlock", "marquee": "m1", "csrf": ada}
    assert await post_action(client, "ada", unlock, **own) == (200, "unlock done by ada\n")
    assert [(action, user) for action, _, user in desk.asked] == [
        ("pause", "otto"),
        ("pause", "otto"),
        ("unlock", "ada"),
    ]
    refused = await post_action(
        client, "otto", {**pause, "marquee": "unknown", "csrf": token}, **own
    )
    assert refused == (409, "refused: no marquee named 'unknown'\n")
    assert (await post_action(client, "otto", {"action": "rm -rf", "csrf": token}, **own))[0] == 400


async def test_actions_past_the_rate_are_429_with_retry_after(
    client: TestClient[Any, Any], desk: RecordingDesk
) -> None:
    app = client.app
    assert app is not None
    handler = next(
        route.handler
        for route in app.router.routes()
        if route.resource is not None and route.resource.canonical == "/action"
    )
    handler.__self__.limit = RateLimit(2, 60.0)
    form = {"action": "cycle", "marquee": "m1", "csrf": await csrf_of(client, "otto")}
    statuses = []
    for _ in range(3):
        answer = await client.post(
            "/action",
            data=form,
            headers={"Authorization": basic("otto", "o-pw"), "Origin": origin(client)},
        )
        statuses.append(answer.status)
    assert statuses == [200, 200, 429]
    assert answer.headers["Retry-After"] in {"59", "60"}
    assert len(desk.asked) == 2


async def test_login_sets_a_strict_http_only_cookie_and_pages_show_forms_by_role(
    client: TestClient[Any, Any], desk: RecordingDesk
) -> None:
    async def log_in(user: str, password: str, **headers: str) -> Any:
        page = await client.get("/login")
        token = re.search(r'name="csrf" value="([^"]+)"', await page.text())
        assert token is not None
        return await client.post(
            "/login",
            data={"user": user, "password": password, "csrf": token[1]},
            headers={"Origin": origin(client), **headers},
            allow_redirects=False,
        )

    with capture_logs() as logs:
        wrong = await log_in("otto", "nope")
        hostile = await log_in("<script>\n" + "x" * 500, "nope")
    assert (wrong.status, hostile.status) == (401, 401)
    lines = [line for line in logs if line["event"] == "web.login"]
    assert [line["ok"] for line in lines] == [False, False]
    assert lines[1]["user"] == repr("<script>\n" + "x" * 55)
    assert (await log_in("otto", "o-pw", Origin="http://evil.example")).status == 403
    answer = await log_in("otto", "o-pw")
    assert answer.status == 303
    cookie = answer.headers["Set-Cookie"]
    assert re.fullmatch(
        r"playguard_session=[A-Za-z0-9_-]{43}; HttpOnly; SameSite=Strict; Path=/", cookie
    )
    fleet = await (await client.get("/", headers={"Accept": "text/html"})).text()
    assert 'id="rows"' in fleet
    assert 'Logged in as <b id="user">otto</b> (operator)' in fleet
    assert 'value="unlock"' not in fleet
    token = re.search(r'name="csrf" value="([^"]+)"', fleet)
    assert token is not None
    done = await client.post(
        "/action",
        data={"action": "pause", "marquee": "m1", "reason": "r", "csrf": token[1], "back": "/"},
        headers={"Origin": origin(client), "Accept": "text/html"},
        allow_redirects=False,
    )
    assert (done.status, done.headers["Location"]) == (303, "/")
    assert "pause done by otto" in await (await client.get("/")).text()
    out = await client.post(
        "/logout",
        data={"csrf": token[1]},
        headers={"Origin": origin(client)},
        allow_redirects=False,
    )
    assert out.status == 303
    assert (await client.get("/")).status == 401


async def test_a_viewer_sees_no_forms(client: TestClient[Any, Any]) -> None:
    page = await client.get("/", headers={"Authorization": basic("vera", "v-pw")})
    text = await page.text()
    assert page.status == 200
    assert 'id="rows"' not in text
    assert 'action="/action"' not in text


async def test_proxy_headers_only_from_trusted_peers_and_logged_once(
    client: TestClient[Any, Any],
) -> None:
    headers = {"X-Forwarded-User": "eve", "X-Forwarded-Groups": "ops"}
    with capture_logs() as logs:
        for _ in range(3):
            assert (await client.get("/csrf", headers=headers)).status == 401
    ignored = [line for line in logs if line["event"] == "web.proxy_header_ignored"]
    assert len(ignored) == 1
    assert ignored[0]["peer"] == "127.0.0.1"
    trusting = TrustedProxy(["127.0.0.0/8"], {"ops": "operator", "admins": "admin"})
    peer = mock.Mock()
    peer.get_extra_info.return_value = ("127.0.0.1", 1)
    request = make_mocked_request(
        "GET",
        "/",
        headers={"X-Forwarded-User": "eve", "X-Forwarded-Groups": "x, admins ,ops"},
        transport=peer,
    )
    principal = trusting.principal(request)
    assert principal is not None
    assert (principal.name, principal.role.label, principal.via) == ("eve", "admin", "proxy")


async def test_failed_checks_past_the_limit_check_nothing_but_a_known_pair(tmp_path: Path) -> None:
    auth = auth_of(tmp_path / "users", USERS)
    assert isinstance(await auth.check("ada", "a-pw", "10.0.0.1"), WebUser)  # remembered
    for _ in range(5):
        assert await auth.check("otto", "guess", "10.0.0.1") == Refused("wrong")
    assert auth.failures_wait("otto", "10.0.0.9") == 60  # the name, from anywhere
    assert await auth.check("otto", "o-pw", "10.0.0.9") == Refused("limited", 60), "not checked"
    assert await auth.check("vera", "v-pw", "10.0.0.1") == Refused("limited", 60), "nor from there"
    assert isinstance(await auth.check("ada", "a-pw", "10.0.0.1"), WebUser), "a known pair is"
    assert isinstance(await auth.check("vera", "v-pw", "10.0.0.2"), WebUser)


async def test_without_users_the_view_only_looks(desk: RecordingDesk) -> None:
    async with serving(view_of(picture_of([]), desk=desk)) as served:
        page = await served.get("/")
        assert 'id="rows"' not in await page.text()
        refused = await served.post(
            "/action",
            data={"action": "pause", "marquee": "m1", "reason": "r"},
            headers={"Origin": origin(served)},
        )
        assert (refused.status, await refused.text()) == (
            403,
            "refused: actions need named users (web_credential_file)\n",
        )
        assert (await served.get("/csrf")).status == 403
    assert desk.asked == []


def test_behind_a_proxy_that_ends_tls_the_own_origin_is_https() -> None:
    request = make_mocked_request(
        "POST", "/action", headers={"Host": "ops.example", "Origin": "https://ops.example"}
    )
    assert not same_origin(request)
    assert same_origin(request, behind_tls=True)


BACKS = [
    ("/marquee/m1", "/marquee/m1"),
    ("/?sort=name&page=2", "/?sort=name&page=2"),
    ("/\t/evil.example", "/"),
    ("/\n/evil.example", "/"),
    ("/\r\n/evil.example", "/"),
    ("//evil.example", "/"),
    ("/\\evil.example", "/"),
    ("/ /evil.example", "/"),
    ("https://evil.example/", "/"),
    ("/\x00/evil.example", "/"),
    ("/é/evil.example", "/"),
    ("evil.example", "/"),
    ("", "/"),
]


@pytest.mark.parametrize(("back", "location"), BACKS)
async def test_a_forms_way_back_is_a_path_of_this_server_whatever_its_bytes(
    client: TestClient[Any, Any], back: str, location: str
) -> None:
    token = await csrf_of(client, "otto")
    answer = await client.post(
        "/action",
        data={"action": "pause", "marquee": "m1", "reason": "r", "csrf": token, "back": back},
        headers={
            "Authorization": basic("otto", USERS["otto"][1]),
            "Origin": origin(client),
            "Accept": "text/html",
        },
        allow_redirects=False,
    )
    assert (answer.status, answer.headers["Location"]) == (303, location)


class EchoingDesk:
    """Answers with what it was given: a value as long as the form could carry."""

    async def act(self, action: str, form: Mapping[str, str], user: str) -> list[str]:
        return [form["reason"]] * 3 + ["short"] * (SHOWN_LINES + 50)


async def test_an_actions_result_is_shown_and_kept_bounded_however_long_what_it_echoes(
    tmp_path: Path,
) -> None:
    view = view_of(picture_of([]), auth=auth_of(tmp_path / "users", USERS), desk=EchoingDesk())
    huge = "x" * 900_000
    async with serving(view) as served:
        token = await csrf_of(served, "otto")
        answer = await served.post(
            "/action",
            data={"action": "pause", "marquee": "m1", "reason": huge, "csrf": token},
            headers={"Authorization": basic("otto", USERS["otto"][1]), "Origin": origin(served)},
        )
        text = await answer.text()
        page = await (
            await served.get("/", headers={"Authorization": basic("otto", USERS["otto"][1])})
        ).text()
    assert answer.status == 200
    assert len(text) < 3 * SHOWN_CHARS + SHOWN_LINES * 10 + 1_000
    assert f"... (+{900_000 - SHOWN_CHARS} characters)" in text
    assert "(+53 lines)" in text
    assert huge[: SHOWN_CHARS + 1] not in page
    assert len(page) < 100_000


async def test_a_proxys_user_and_a_files_user_of_one_name_are_two_identities(
    tmp_path: Path, desk: RecordingDesk
) -> None:
    proxy = TrustedProxy(["127.0.0.1/32"], {"ops": "operator"})
    view = view_of(picture_of([]), auth=auth_of(tmp_path / "users", USERS, proxy=proxy), desk=desk)
    by_proxy = {"X-Forwarded-User": "otto", "X-Forwarded-Groups": "ops"}
    by_file = {"Authorization": basic("otto", USERS["otto"][1])}
    async with serving(view) as served:
        tokens = {}
        for who, headers in (("proxy", by_proxy), ("file", by_file)):
            tokens[who] = (await (await served.get("/csrf", headers=headers)).text()).strip()
        assert tokens["proxy"] != tokens["file"]
        pause = {"action": "pause", "marquee": "m1", "reason": "r"}
        own = {"Origin": origin(served)}
        crossed = await served.post(
            "/action", data={**pause, "csrf": tokens["proxy"]}, headers={**by_file, **own}
        )
        assert crossed.status == 403
        acted = await served.post(
            "/action", data={**pause, "csrf": tokens["proxy"]}, headers={**by_proxy, **own}
        )
        assert acted.status == 200
        file_page = await (await served.get("/", headers=by_file)).text()
        proxy_page = await (await served.get("/", headers=by_proxy)).text()
    assert [user for _, _, user in desk.asked] == ["proxy:otto"]
    assert "pause done by proxy:otto" in proxy_page
    assert "pause done by" not in file_page


@pytest.mark.parametrize(
    ("form", "asked"),
    [
        (
            {"row": "pause m1", "reason": "disk"},
            {"action": "pause", "marquee": "m1", "reason": "disk"},
        ),
        ({"row": "plan m1"}, {"action": "plan", "marquee": "m1"}),
        ({"row": "cycle"}, {"action": "cycle", "marquee": ""}),
        ({"row": "resume m1 m2"}, {"action": "resume", "marquee": "m1 m2"}),
        ({"row": "", "action": "pause"}, {"action": "", "marquee": ""}),
        ({"action": "pause", "marquee": "m1"}, {"action": "pause", "marquee": "m1"}),
    ],
)
def test_a_rows_button_names_the_action_and_the_marquee_in_one_value(
    form: dict[str, str], asked: dict[str, str]
) -> None:
    assert rowed(form) == asked


async def test_a_fleet_rows_buttons_act_on_their_row_through_the_shared_form(
    tmp_path: Path, desk: RecordingDesk
) -> None:
    view = view_of(
        picture_of(
            [
                MarqueeStatus("alpha", True, None, None),
                MarqueeStatus(
                    "beta", True, None, None, pause=Pause("beta", "o", "h", "r", 1.0, 2e9)
                ),
            ]
        ),
        auth=auth_of(tmp_path / "users", USERS),
        desk=desk,
    )
    async with serving(view) as client:
        page = await (
            await client.get("/", headers={"Authorization": basic("otto", USERS["otto"][1])})
        ).text()
        buttons = re.findall(r'<button name="row" value="([^"]+)">', page)
        assert buttons == [
            "pause alpha", "cycle alpha", "plan alpha", "resume beta", "cycle beta", "plan beta",
        ]  # fmt: skip
        token = await csrf_of(client, "otto")
        form = {"row": "pause beta", "reason": "disk", "csrf": token}
        assert await post_action(client, "otto", form, Origin=origin(client)) == (
            200,
            "pause done by otto\n",
        )
        viewer = await (
            await client.get("/", headers={"Authorization": basic("vera", USERS["vera"][1])})
        ).text()
    assert desk.asked == [
        ("pause", {"action": "pause", "marquee": "beta", "reason": "disk", "csrf": token}, "otto")
    ]
    assert 'name="row"' not in viewer
