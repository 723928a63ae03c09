"""The login page and logout of the web view: a user of the users file logs in with a form and
gets a session cookie (``web.sessions``); logging out ends the session.

The form carries a CSRF token bound to a cookie the login page sets (an HMAC of its random
value and the time it was served, under a key of this process) and must come from this server's
own origin, so another site cannot log a browser in as someone else; a form may be sent once, and
within ``FORM_AGE`` seconds. Failed attempts are limited per user name and per
client address (``WebAuth.check``: then 429), and every attempt is one log line with the name
bounded and escaped. The password check runs in a thread (``PasswordCheck``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

import jinja2
import structlog
from aiohttp import hdrs, web

from playguard_async.web.actions import CSRF_HEADER, same_origin
from playguard_async.web.auth import (
    Refused,
    WebAuth,
    session_id_of,
    shown_name,
    still_there,
)
from playguard_async.web.http_guard import principal_of
from playguard_async.web.sessions import cleared_cookie, session_cookie

log = structlog.get_logger("playguard.web")

LOGIN_COOKIE = "playguard_login"
NAME_LIMIT = 200
PASSWORD_LIMIT = 1_024

REFUSALS = {
    "limited": (429, "Too many failed logins: wait {wait} s."),
    "busy": (503, "Too many logins at once: try again in a moment."),
    "gone": (503, "Too many logins at once: try again in a moment."),
    "wrong": (401, "Wrong user or password."),
}
"""The status and the form's words for each way a login is refused (``Refused.why``)."""

FORM_AGE = 600.0
"""Seconds a login form may be sent after it was served: its nonce is then too old."""

SPENT_KEPT = 10_000
"""Forms sent (their nonces) remembered at most, so none is taken twice (``WebLogin.spend``)."""


class WebLogin:
    def __init__(
        self,
        auth: WebAuth,
        environment: jinja2.Environment,
        clock: Callable[[], float] = time.monotonic,
        spent_kept: int = SPENT_KEPT,
    ) -> None:
        self.auth = auth
        self.spent_kept = spent_kept
        self.environment = environment
        self.clock = clock
        self._key = secrets.token_bytes(32)
        self._spent: OrderedDict[str, float] = OrderedDict()
        self._floor = 0.0

    def spend(self, nonce: str) -> bool:
        """Whether the form of ``nonce`` (one this process signed) may be sent now: issued
        within ``FORM_AGE`` seconds, and never sent before. Spent nonces are remembered until
        they would have expired, ``SPENT_KEPT`` at most: past that the oldest is forgotten and
        every form issued before it refused, so none is ever taken twice."""
        now = self.clock()
        millis = nonce.partition(".")[0]
        if not (millis.isascii() and millis.isdigit()):
            return False
        issued = int(millis) / 1000
        while self._spent and (
            len(self._spent) >= self.spent_kept or next(iter(self._spent.values())) < now - FORM_AGE
        ):
            _, forgotten = self._spent.popitem(last=False)
            self._floor = max(self._floor, forgotten)
        if not now - FORM_AGE <= issued <= now or issued <= self._floor or nonce in self._spent:
            return False
        self._spent[nonce] = issued
        return True

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/login", self.page)
        app.router.add_post("/login", self.login)
        app.router.add_post("/logout", self.logout)

    def _token(self, nonce: str) -> str:
        message = f"login\n{nonce}".encode("utf-8", "surrogateescape")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def _form(self, request: web.BaseRequest, status: int = 200, why: str = "") -> web.Response:
        nonce = f"{int(self.clock() * 1000)}.{secrets.token_urlsafe(32)}"  # issued, in ms
        html = self.environment.get_template("login.html").render(csrf=self._token(nonce), why=why)
        response = web.Response(status=status, text=html, content_type="text/html")
        response.headers[hdrs.SET_COOKIE] = (
            f"{LOGIN_COOKIE}={nonce}; HttpOnly; SameSite=Strict; Path=/login"
            + ("; Secure" if self.auth.secure(request) else "")
        )
        return response

    async def page(self, request: web.Request) -> web.Response:
        return self._form(request)

    async def login(self, request: web.Request) -> web.StreamResponse:
        client = self.auth.client_of(request)
        if not same_origin(request, behind_tls=self.auth.secure(request)):
            return self._form(request, 403, "This form must be sent from this server's page.")
        form = await request.post()
        name, password, offered = (str(form.get(key, "")) for key in ("user", "password", "csrf"))
        nonce = request.cookies.get(LOGIN_COOKIE, "")
        if not nonce or not hmac.compare_digest(
            offered.encode("utf-8", "surrogateescape"), self._token(nonce).encode()
        ):
            return self._form(request, 403, "The form expired: try again.")
        if not self.spend(nonce):
            return self._form(request, 403, "The form expired: try again.")
        name, password = name[:NAME_LIMIT], password[:PASSWORD_LIMIT]
        user = await self.auth.check(name, password, client, wanted=still_there(request))
        if isinstance(user, Refused):
            log.warning("web.login", user=shown_name(name), client=client, ok=False,
                        why=user.why)  # fmt: skip
            status, text = REFUSALS[user.why]
            response = self._form(request, status, text.format(wait=user.retry_after))
            if user.retry_after is not None:
                response.headers[hdrs.RETRY_AFTER] = str(user.retry_after)
            return response
        session_id, _ = self.auth.sessions.open(user)
        log.info("web.login", user=shown_name(user.name), client=client, ok=True)
        response = web.HTTPSeeOther("/")
        response.headers[hdrs.SET_COOKIE] = session_cookie(
            session_id, secure=self.auth.secure(request)
        )
        raise response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        principal = principal_of(request)
        session_id = session_id_of(request)
        if principal is None or principal.session is None or session_id is None:
            return web.Response(status=400, text="not logged in with a session\n")
        form = await request.post()
        offered = str(form.get("csrf", "")) or request.headers.get(CSRF_HEADER, "")
        if not same_origin(
            request, behind_tls=self.auth.secure(request)
        ) or not hmac.compare_digest(
            offered.encode("utf-8", "surrogateescape"), principal.session.csrf.encode()
        ):
            return web.Response(status=403, text="refused: not from this server's page\n")
        self.auth.sessions.close(session_id)
        log.info("web.logout", user=shown_name(principal.name))
        response = web.HTTPSeeOther("/login")
        response.headers[hdrs.SET_COOKIE] = cleared_cookie(secure=self.auth.secure(request))
        raise response
