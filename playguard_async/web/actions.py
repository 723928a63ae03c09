"""Acting from the web view: pause, resume, plan, cycle now, pin, unpin, rollout promote / pause
/ resume / abort for operators, unlock for admins, each run by the CLI's own code (an
``ActionDesk``, which the daemon is given by the command that starts it) with the user's name as
who did it.

An action is a POST to /action, and every one passes, in this order:
- **who**: a user (``web.http_guard.principal_of``) whose role allows the action, else 403;
- **Origin**: the request's ``Origin`` (or, without one, its ``Referer``'s origin) is this page's
  own (the scheme and the Host the guard admitted), else 403: a form or fetch of another site,
  or a page on another port of this machine, is refused before anything is read;
- **CSRF token**: the session's (a login's), or for basic auth and proxy users a token of their
  name under a key of this process (``GET /csrf``), in the form's ``csrf`` field or the
  ``X-CSRF-Token`` header, compared in constant time, else 403;
- **rate**: at most ``ACTIONS_PER_MINUTE`` per user, else 429 with ``Retry-After``.

A browser's form is answered 303 back to the page it came from, whose next render shows the
result (``results``); a script (no ``text/html`` in Accept) gets the result as text. Pages are
rendered once per role bucket and served to every user of it (``web.view``); what is
one user's own (the CSRF token, who is logged in, the last results) is put in at serving time,
in place of slots whose names are random per process, so no outside value can name them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

import jinja2
import structlog
from aiohttp import hdrs, web
from markupsafe import Markup

from playguard_async.kits.rate_limit import RateLimit
from playguard_async.web.auth import Principal, WebAuth, shown_name
from playguard_async.web.http_guard import principal_of
from playguard_async.web.users import Role

log = structlog.get_logger("playguard.web")

ACTIONS: Mapping[str, Role] = {
    "pause": Role.OPERATOR,
    "resume": Role.OPERATOR,
    "plan": Role.OPERATOR,
    "cycle": Role.OPERATOR,
    "pin": Role.OPERATOR,
    "unpin": Role.OPERATOR,
    "rollout-promote": Role.OPERATOR,
    "rollout-pause": Role.OPERATOR,
    "rollout-resume": Role.OPERATOR,
    "rollout-abort": Role.OPERATOR,
    "unlock": Role.ADMIN,
}
"""Each action and the least role that may run it."""

ACTIONS_PER_MINUTE = 30
RESULTS_KEPT = 5
"""Results of a user's actions their pages show, the newest first."""
USERS_WITH_RESULTS = 1_000
CSRF_HEADER = "X-CSRF-Token"
SHOWN_LINES = 200
"""Lines of an action's result a page shows at most (a plan of a big Marquee is long)."""
SHOWN_CHARS = 500
"""Characters of one line of an action's result shown at most."""


class ActionRefused(Exception):
    """An action that cannot be done as asked; the message says why, for the page."""


class ActionDesk(Protocol):
    """What runs the actions: the CLI's code (``operator.web_desk``)."""

    async def act(self, action: str, form: Mapping[str, str], user: str) -> list[str]:
        """Run ``action`` (a key of ``ACTIONS``) with ``form``'s fields as ``user``; its
        result as lines. ``ActionRefused`` when it cannot be done as asked."""
        ...


def request_origin(request: web.BaseRequest, *, behind_tls: bool = False) -> str:
    """This page's own origin: the scheme (``https`` when a proxy in front ends TLS:
    ``web_cookie_secure``) and the Host the guard admitted."""
    scheme = "https" if behind_tls else request.scheme
    return f"{scheme}://{request.host}".lower()


def same_origin(request: web.BaseRequest, *, behind_tls: bool = False) -> bool:
    """Whether ``request`` comes from a page of this server: its ``Origin`` is ours, or it has
    none and its ``Referer``'s origin is; neither (or ``Origin: null``): no."""
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:
        referer = request.headers.get(hdrs.REFERER)
        if referer is None:
            return False
        try:
            parts = urlsplit(referer)
        except ValueError:
            return False
        origin = f"{parts.scheme}://{parts.netloc}"
    return hmac.compare_digest(
        origin.strip().lower().encode("utf-8", "surrogateescape"),
        request_origin(request, behind_tls=behind_tls).encode("utf-8", "surrogateescape"),
    )


def back_to(path: str | None) -> str:
    """Where a form's 303 goes: a path of this server, else the fleet. Only printable ASCII
    without spaces or backslashes is taken: a client (and aiohttp, writing ``Location``) drops a
    tab or newline, so ``/\t/evil.example`` would become ``//evil.example``, another site."""
    if (
        not path
        or not (path.isascii() and path.isprintable())
        or " " in path
        or "\\" in path
        or not path.startswith("/")
        or path.startswith("//")
    ):
        return "/"
    parts = urlsplit(path)
    return "/" if parts.scheme or parts.netloc else path


class WebActions:
    """The action endpoint, the login and logout, and what each user's pages carry of their
    own. ``desk`` None: no actions (the view is read-only); ``auth`` None: nobody is asked who
    they are (loopback with no users), so nobody may act."""

    def __init__(
        self,
        desk: ActionDesk | None,
        auth: WebAuth | None,
        environment: jinja2.Environment,
        *,
        actions_per_minute: int = ACTIONS_PER_MINUTE,
    ) -> None:
        self.desk = desk
        self.auth = auth
        self.environment = environment
        self.limit = RateLimit(actions_per_minute, 60.0)
        self.results: OrderedDict[str, deque[tuple[str, list[str]]]] = OrderedDict()
        self._key = secrets.token_bytes(32)
        self.csrf_slot = "csrf" + secrets.token_hex(16)
        self.personal_slot = "personal" + secrets.token_hex(16)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/action", self.action)
        app.router.add_get("/csrf", self.csrf)

    def user_token(self, name: str) -> str:
        """The CSRF token of a user without a session (basic auth, a proxy's user)."""
        return hmac.new(self._key, f"csrf\n{name}".encode(), hashlib.sha256).hexdigest()

    def token_of(self, principal: Principal) -> str:
        return principal.session.csrf if principal.session else self.user_token(principal.identity)

    # Pages

    def bucket(self, request: web.BaseRequest) -> str:
        """Which rendering of a page ``request`` gets: with which actions (none, operator's,
        admin's)."""
        principal = principal_of(request)
        if self.desk is None or principal is None or not principal.may(Role.OPERATOR):
            return ""
        return principal.role.label

    def page_values(self, bucket: str) -> dict[str, Any]:
        """What the templates are given for ``bucket``: which actions to show, and the slots."""
        role = Role.named(bucket)
        return {
            "can_act": role is not None,
            "can_unlock": role is not None and role >= ACTIONS["unlock"],
            "csrf": self.csrf_slot,
            "personal": Markup(self.personal_slot),
        }

    def fill(self, request: web.BaseRequest, page: bytes) -> bytes:
        """``page`` (rendered for the bucket) with ``request``'s user's own parts put in; with
        nobody logged in, the slots emptied."""
        principal = principal_of(request)
        token, personal = "", ""
        if principal is not None:
            token = self.token_of(principal)
            results = list(self.results.get(principal.identity, ()))
            personal = self.environment.get_template("personal.html").render(
                principal=principal, csrf=token, results=results
            )
        return page.replace(self.csrf_slot.encode(), token.encode()).replace(
            self.personal_slot.encode(), personal.encode()
        )

    # Endpoints

    async def csrf(self, request: web.Request) -> web.Response:
        """The CSRF token of who asks, for a script's ``X-CSRF-Token``; another site cannot read
        it (no CORS header is ever sent)."""
        principal = principal_of(request)
        if principal is None:
            return web.Response(status=403, text="no user: set web_credential_file\n")
        return web.Response(text=self.token_of(principal) + "\n")

    async def action(self, request: web.Request) -> web.StreamResponse:
        principal = principal_of(request)
        if principal is None or self.desk is None:
            return _refused(403, "actions need named users (web_credential_file)")
        behind_tls = self.auth is not None and self.auth.secure(request)
        if not same_origin(request, behind_tls=behind_tls):
            log.warning("web.action_refused", user=shown_name(principal.name), why="origin")
            own = request_origin(request, behind_tls=behind_tls)
            return _refused(403, f"not from a page of {own}")
        form = {key: value for key, value in (await request.post()).items()
                if isinstance(value, str)}  # fmt: skip
        offered = form.get("csrf") or request.headers.get(CSRF_HEADER) or ""
        if not hmac.compare_digest(
            offered.encode("utf-8", "surrogateescape"), self.token_of(principal).encode()
        ):
            log.warning("web.action_refused", user=shown_name(principal.name), why="csrf")
            return _refused(403, "missing or wrong CSRF token: reload the page")
        form = rowed(form)
        name = form.get("action", "")
        needed = ACTIONS.get(name)
        if needed is None:
            return _refused(400, f"no action {name[:40]!r}")
        if not principal.may(needed):
            log.warning("web.action_refused", user=shown_name(principal.name), action=name,
                        why="role")  # fmt: skip
            return _refused(403, f"{name} needs the role {needed.label}")
        wait = self.limit.take(principal.identity)
        if wait is not None:
            return web.Response(
                status=429,
                text=f"more than {self.limit.limit} actions a minute; try again in {wait} s\n",
                headers={hdrs.RETRY_AFTER: str(wait)},
            )
        try:
            lines = await self.desk.act(name, form, principal.identity)
            ok = True
        except ActionRefused as exc:
            lines, ok = [f"refused: {exc}"], False
        log.info(
            "web.action",
            user=shown_name(principal.name),
            action=name,
            ok=ok,
            marquee=form.get("marquee", "")[:80],
            scope=form.get("scope", "")[:80],
        )
        shown = bounded(lines)
        self._keep(principal.identity, name, shown)
        if not request.headers.get(hdrs.ACCEPT, "").startswith("text/html"):
            return web.Response(status=200 if ok else 409, text="\n".join(shown) + "\n")
        raise web.HTTPSeeOther(back_to(form.get("back")))

    def _keep(self, user: str, action: str, shown: list[str]) -> None:
        kept = self.results.pop(user, None) or deque(maxlen=RESULTS_KEPT)
        kept.appendleft((action, shown))
        self.results[user] = kept
        if len(self.results) > USERS_WITH_RESULTS:
            self.results.popitem(last=False)


ROW_ACTIONS = ("pause", "resume", "cycle", "plan")
"""What a row of the fleet page offers (a Marquee's own actions that need nothing but a reason)."""


def rowed(form: Mapping[str, str]) -> dict[str, str]:
    """``form`` with its ``row`` field (the fleet page's per-row buttons: ``ACTION MARQUEE``, one
    value each, so a page of rows shares one form) read as the ``action`` and ``marquee`` fields
    a Marquee's own form sends; a form without one is as it came."""
    fields = dict(form)
    row = fields.pop("row", None)
    if row is not None:
        fields["action"], _, fields["marquee"] = row.partition(" ")
    return fields


def bounded(lines: list[str]) -> list[str]:
    """An action's result as it is shown and kept: ``SHOWN_LINES`` lines of ``SHOWN_CHARS``
    characters at most, what is cut said, so a value echoed back (a reason, a name) cannot make
    every page of its user megabytes long."""
    cut = [
        line
        if len(line) <= SHOWN_CHARS
        else f"{line[:SHOWN_CHARS]}... (+{len(line) - SHOWN_CHARS} characters)"
        for line in lines[:SHOWN_LINES]
    ]
    return cut + ([f"(+{len(lines) - SHOWN_LINES} lines)"] if len(lines) > SHOWN_LINES else [])


def _refused(status: int, why: str) -> web.Response:
    return web.Response(status=status, text=f"refused: {why}\n")
