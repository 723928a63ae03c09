"""The login form under concurrent guessing, on a real aiohttp server on loopback with real argon2
(at its cheapest cost): an attempt is counted before its password is checked, so however many
come at once at most the limit are checked; a known pair, or a user's own recent client, still
gets in while others lock the name; behind a trusted proxy each forwarded client counts alone;
work for a client that hung up is dropped."""

from __future__ import annotations

import asyncio
import re
import urllib.parse
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import jinja2
import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from playguard_async.web.auth import FAILURES_PER_MINUTE, TrustedProxy, WebAuth
from playguard_async.web.login import FORM_AGE, WebLogin
from playguard_async.web.sessions import SESSIONS_PER_USER
from playguard_async.web.users import VERIFY_CONCURRENCY
from tests.support.web_users import CHEAP, auth_of, basic, write_users
from tests.support.web_view import picture_of, serving, view_of

USERS = {"ada": ("admin", "a-pw-long-enough"), "otto": ("operator", "o-pw-long-enough")}

Form = tuple[str, str]
"""The login cookie's nonce and the form's CSRF token of one visit of the login page."""


@asynccontextmanager
async def login_server(tmp_path: Path, proxy: TrustedProxy | None = None) -> AsyncIterator[str]:
    auth = auth_of(tmp_path / "users", USERS, proxy=proxy)
    async with serving(view_of(picture_of([]), auth=auth)) as client:
        yield str(client.make_url("")).rstrip("/")


@asynccontextmanager
async def browser(source: str = "127.0.0.1") -> AsyncIterator[aiohttp.ClientSession]:
    """A client from loopback address ``source`` that keeps no cookie (each test sends its own)."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0), limit=0)
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:
        yield session


async def login_form(session: aiohttp.ClientSession, base: str) -> Form:
    answer = await session.get(f"{base}/login")
    found = re.search(r'name="csrf" value="([^"]+)"', await answer.text())
    assert found is not None
    return answer.cookies["playguard_login"].value, found[1]


async def log_in(
    session: aiohttp.ClientSession,
    base: str,
    user: str,
    password: str,
    *,
    forwarded_for: str | None = None,
) -> int:
    nonce, csrf = await login_form(session, base)
    headers = {"Origin": base, "Cookie": f"playguard_login={nonce}"}
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    answer = await session.post(
        f"{base}/login",
        data={"user": user, "password": password, "csrf": csrf},
        headers=headers,
        allow_redirects=False,
    )
    return answer.status


def why_refused(logs: list[Any], user: str) -> Counter[str]:
    return Counter(
        line["why"]
        for line in logs
        if line["event"] == "web.login" and line["user"] == repr(user) and not line["ok"]
    )


async def test_of_concurrent_guesses_at_most_the_limit_are_checked_and_the_right_one_refused(
    tmp_path: Path,
) -> None:
    async with login_server(tmp_path) as base, browser() as session:
        with capture_logs() as logs:
            statuses = await asyncio.gather(
                *(log_in(session, base, "ada", f"guess-{n}") for n in range(30))
            )
            right = await log_in(session, base, "ada", USERS["ada"][1])
    assert Counter(statuses) == {401: FAILURES_PER_MINUTE, 429: 30 - FAILURES_PER_MINUTE}
    assert right == 429
    assert why_refused(logs, "ada") == {"wrong": FAILURES_PER_MINUTE, "limited": 31 - 5}


async def test_a_users_login_while_one_address_floods_waits_for_no_more_than_the_limits_checks(
    tmp_path: Path,
) -> None:
    async with login_server(tmp_path) as base, browser() as flooder, browser("127.0.0.2") as user:
        with capture_logs() as logs:
            flood = asyncio.gather(*(log_in(flooder, base, "otto", f"g-{n}") for n in range(100)))
            own = await log_in(user, base, "ada", USERS["ada"][1])
            statuses = await flood
    assert own == 303
    assert Counter(statuses) == {401: FAILURES_PER_MINUTE, 429: 100 - FAILURES_PER_MINUTE}
    logins = [line for line in logs if line["event"] == "web.login"]
    ada_at = next(n for n, line in enumerate(logins) if line["user"] == "'ada'")
    checked_before = [line for line in logins[:ada_at] if line.get("why") == "wrong"]
    assert len(checked_before) <= FAILURES_PER_MINUTE


LOCKERS = [f"127.0.1.{n}" for n in range(1, FAILURES_PER_MINUTE + 1)]


async def lock_the_name(base: str, name: str) -> None:
    """``FAILURES_PER_MINUTE`` wrong guesses at ``name``, each from an address of its own."""
    for source in LOCKERS:
        async with browser(source) as session:
            assert await log_in(session, base, name, "wrong-guess") == 401


async def test_a_known_pair_logs_in_on_the_form_while_others_lock_its_name(tmp_path: Path) -> None:
    async with login_server(tmp_path) as base:
        async with browser("127.0.0.9") as script:
            answer = await script.get(
                f"{base}/", headers={"Authorization": basic("ada", USERS["ada"][1])}
            )
            assert answer.status == 200
        await lock_the_name(base, "ada")
        async with browser("127.0.0.7") as elsewhere:
            assert await log_in(elsewhere, base, "ada", USERS["ada"][1]) == 303
            assert await log_in(elsewhere, base, "otto", USERS["otto"][1]) == 303


@pytest.mark.parametrize(("source", "status"), [("127.0.0.2", 303), ("127.0.0.8", 429)])
async def test_a_users_own_recent_client_gets_in_after_a_password_change_while_the_name_is_locked(
    tmp_path: Path, source: str, status: int
) -> None:
    async with login_server(tmp_path) as base:
        async with browser("127.0.0.2") as own:
            assert await log_in(own, base, "ada", USERS["ada"][1]) == 303
        write_users(tmp_path / "users", {**USERS, "ada": ("admin", "a-new-pw-long-enough")})
        await lock_the_name(base, "ada")
        async with browser(source) as session:
            assert await log_in(session, base, "ada", "a-new-pw-long-enough") == status


@pytest.mark.parametrize(("trusted", "status"), [(True, 303), (False, 429)])
async def test_behind_a_trusted_proxy_failures_count_on_the_forwarded_client(
    tmp_path: Path, trusted: bool, status: int
) -> None:
    proxy = TrustedProxy(["127.0.0.1/32"] if trusted else ["10.9.0.0/16"], {})
    async with login_server(tmp_path, proxy) as base, browser() as through_proxy:
        for _ in range(FAILURES_PER_MINUTE):
            wrong = await log_in(through_proxy, base, "otto", "guess", forwarded_for="203.0.113.9")
            assert wrong == 401
        own = await log_in(
            through_proxy, base, "ada", USERS["ada"][1], forwarded_for="198.51.100.4, 127.0.0.1"
        )
    assert own == status


async def hang_up_after_posting(base: str, form: Form, user: str, client: str) -> None:
    """A login POSTed whole, then the connection closed without waiting for the answer."""
    nonce, csrf = form
    body = urllib.parse.urlencode({"user": user, "password": "guess", "csrf": csrf}).encode()
    host = base.removeprefix("http://")
    head = (
        f"POST /login HTTP/1.1\r\nHost: {host}\r\nOrigin: {base}\r\n"
        f"Cookie: playguard_login={nonce}\r\nX-Forwarded-For: {client}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    port = int(host.rpartition(":")[2])
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + body)
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def test_checks_for_clients_that_hung_up_are_dropped_not_run(tmp_path: Path) -> None:
    proxy = TrustedProxy(["127.0.0.1/32"], {})
    async with login_server(tmp_path, proxy) as base, browser() as session:
        forms = [await login_form(session, base) for _ in range(40)]
        with capture_logs() as logs:
            await asyncio.gather(
                *(
                    hang_up_after_posting(base, form, f"user{n}", f"203.0.113.{n}")
                    for n, form in enumerate(forms)
                )
            )
            for _ in range(200):
                if sum(line["event"] == "web.login" for line in logs) == 40:
                    break
                await asyncio.sleep(0.05)
            after = await log_in(session, base, "ada", USERS["ada"][1], forwarded_for="192.0.2.1")
    logins = [line for line in logs if line["event"] == "web.login"]
    refused = Counter(line["why"] for line in logins if not line["ok"])
    assert sum(refused.values()) == 40
    assert refused["wrong"] <= VERIFY_CONCURRENCY, refused
    assert refused["gone"] + refused["busy"] >= 40 - VERIFY_CONCURRENCY
    assert after == 303
    assert [line["user"] for line in logins if line["ok"]] == ["'ada'"]


async def session_of(session: aiohttp.ClientSession, base: str, user: str) -> str:
    """A login of ``user`` on a fresh form: the session cookie it set."""
    nonce, csrf = await login_form(session, base)
    answer = await session.post(
        f"{base}/login",
        data={"user": user, "password": USERS[user][1], "csrf": csrf},
        headers={"Origin": base, "Cookie": f"playguard_login={nonce}"},
        allow_redirects=False,
    )
    assert answer.status == 303
    return answer.cookies["playguard_session"].value


async def page_status(session: aiohttp.ClientSession, base: str, session_id: str) -> int:
    """The fleet page's status with ``session_id``: 200, or 303 to /login when it is no session."""
    answer = await session.get(
        f"{base}/",
        headers={"Cookie": f"playguard_session={session_id}", "Accept": "text/html"},
        allow_redirects=False,
    )
    return answer.status


async def test_a_users_many_logins_end_only_their_own_oldest_sessions(tmp_path: Path) -> None:
    async with login_server(tmp_path) as base, browser() as session:
        others = await session_of(session, base, "otto")
        many = [await session_of(session, base, "ada") for _ in range(SESSIONS_PER_USER + 5)]
        assert await page_status(session, base, others) == 200
        assert [await page_status(session, base, sid) for sid in many] == [303] * 5 + [200] * (
            SESSIONS_PER_USER
        )


async def test_one_login_form_sent_again_and_again_is_taken_once(tmp_path: Path) -> None:
    async with login_server(tmp_path) as base, browser() as session:
        nonce, csrf = await login_form(session, base)
        statuses = []
        for _ in range(10):
            answer = await session.post(
                f"{base}/login",
                data={"user": "ada", "password": USERS["ada"][1], "csrf": csrf},
                headers={"Origin": base, "Cookie": f"playguard_login={nonce}"},
                allow_redirects=False,
            )
            statuses.append(answer.status)
    assert statuses == [303] + [403] * 9


def rewrite_line(path: Path, name: str, line: str | None) -> None:
    """``name``'s line of the users file ``path`` replaced by ``line`` (None: removed), every
    other line kept byte for byte."""
    kept = [old for old in path.read_text().splitlines() if old.split()[0] != name]
    path.write_text("".join(f"{entry}\n" for entry in [*kept, *([line] if line else [])]))


def hashed(name: str, role: str, password: str) -> str:
    return f"{name} {role} {CHEAP.hash(password)}"


LINE_CHANGES = [
    ("ada", hashed("ada", "admin", "another-password"), 303),  # the password
    ("ada", hashed("ada", "viewer", USERS["ada"][1]), 303),  # the role
    ("ada", None, 303),  # removed
    ("otto", hashed("otto", "viewer", "otto-new-password"), 200),  # someone else's
]


@pytest.mark.parametrize(("name", "line", "status"), LINE_CHANGES)
async def test_a_session_ends_when_its_users_line_changes_and_only_then(
    tmp_path: Path, name: str, line: str | None, status: int
) -> None:
    async with login_server(tmp_path) as base, browser() as session:
        ada = await session_of(session, base, "ada")
        rewrite_line(tmp_path / "users", name, line)
        assert await page_status(session, base, ada) == status


async def test_a_user_removed_and_written_again_does_not_revive_the_old_session(
    tmp_path: Path,
) -> None:
    async with login_server(tmp_path) as base, browser() as session:
        ada = await session_of(session, base, "ada")
        rewrite_line(tmp_path / "users", "ada", None)
        assert await page_status(session, base, ada) == 303
        rewrite_line(tmp_path / "users", "ada", hashed("ada", "admin", USERS["ada"][1]))
        assert await page_status(session, base, ada) == 303


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_login_form_is_taken_once_and_only_within_its_age(tmp_path: Path) -> None:
    clock = Clock()
    login = WebLogin(auth_of(tmp_path / "users", USERS), jinja2.Environment(), clock=clock)
    fresh = f"{int(clock.now * 1000)}.a"
    old = f"{int((clock.now - FORM_AGE - 1) * 1000)}.b"
    assert [login.spend(fresh), login.spend(fresh), login.spend(old)] == [True, False, False]
    assert [login.spend(bad) for bad in ("", "x", "1e999.c", "nan.d", "-5.e", "٣.f")] == [False] * 6


@given(st.lists(st.integers(0, 40), min_size=1, max_size=300), st.integers(1, 8))
def test_no_login_form_is_ever_taken_twice_however_full_the_memory(
    sent: list[int], kept: int
) -> None:
    clock = Clock()
    login = WebLogin(WebAuth(None), jinja2.Environment(), clock=clock, spent_kept=kept)
    taken: set[str] = set()
    for number in sent:
        nonce = f"{1_000_000 + number * 10}.n{number}"
        clock.now = max(clock.now, 1000 + number / 100)
        if login.spend(nonce):
            assert nonce not in taken
            taken.add(nonce)
