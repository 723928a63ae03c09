"""What every answer of the HTTP endpoints goes through: the Host check, the credential, the
security headers, and one bounded log line for whatever was refused.

- **Host.** A page of ``evil.example`` whose name an attacker re-points at 127.0.0.1 (DNS
  rebinding) reaches a loopback server from the browser of someone on the machine, or through an
  operator's ``ssh -L``, with the browser's same-origin blessing; it still sends
  ``Host: evil.example``. So a request is answered only when its Host names the bound address
  (any loopback address and ``localhost`` when that is loopback; any address when it is every
  interface, ``0.0.0.0`` or ``::``) or a name of ``http_allowed_hosts``; the rest get 421.
- **Who.** With users (``web_credential_file``) or a trusted proxy set, everything but the probes
  (/healthz, /readyz), the login page and the static files asks who is there
  (``web.auth``), and /metrics only with ``metrics_require_credential``; who it is goes
  with the request (``principal_of``) for the actions to check the role of. A browser asking for
  a page without one is sent to the login page; anything else gets 401 with basic auth's
  challenge.
- **Headers.** The security headers are on every answer: our pages, aiohttp's own 404, 405, 413
  and 500 (the ``on_response_prepare`` signal), and the 400s aiohttp's parser answers before any
  application sees the request (``serving`` gives the server a request class for those).
- **Log.** A refused request is outside input, as many as a peer likes: refusals (and the parser's
  400s, which aiohttp would log with a traceback each) are counted and told in one line at most
  every ``REFUSAL_LOG_INTERVAL`` seconds, naming no credential and no header's content.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler

from playguard_async.kits.host_header import IPAddress, host_entry, host_of
from playguard_async.web.auth import CHALLENGE, Principal, WebAuth

log = structlog.get_logger("playguard.http")

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    # Not no-referrer: with it a browser sends ``Origin: null`` on a form's POST, and the actions'
    # Origin check could not tell our own pages from a sandboxed frame of anyone's.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""On every answer: nothing inline or from elsewhere runs, nothing is sniffed, framed or cached."""

PROBES = frozenset({"/healthz", "/readyz"})
"""Paths that never ask for the credential: orchestrators probe without one."""

OPEN_PATHS = PROBES | {"/login"}
"""Paths anyone may reach: the probes, and the login page (which checks its own form)."""

STATIC_PREFIX = "/static/"
"""The page's script and style, which the login page needs too; they hold no fleet data."""

PRINCIPAL = web.RequestKey("principal", Principal)
"""The request's key of who it comes from (``principal_of``)."""

METRICS = "/metrics"

REFUSAL_LOG_INTERVAL = 60.0
"""Seconds between two ``http.refused`` lines at most, however many requests are refused."""

MISDIRECTED = (
    "misdirected request: this server answers to its own address and the names of "
    "http_allowed_hosts only\n"
)


class RefusalLog:
    """Refused requests, counted by reason and told in one ``http.refused`` line at most every
    ``interval`` seconds of ``clock``: the first refusal at once, later ones with the counts of
    every refusal since the previous line."""

    def __init__(
        self,
        interval: float = REFUSAL_LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.clock = clock
        self.counts: Counter[str] = Counter()
        self.told_at: float | None = None

    def refused(self, reason: str) -> None:
        self.counts[reason] += 1
        now = self.clock()
        if self.told_at is not None and now - self.told_at < self.interval:
            return
        log.warning(
            "http.refused",
            reason=reason,
            refused=dict(self.counts),
            within=None if self.told_at is None else round(now - self.told_at, 1),
        )
        self.counts.clear()
        self.told_at = now


@dataclass(frozen=True)
class HostRule:
    """Which ``Host`` headers name this server (see the module's docstring)."""

    names: frozenset[str] = frozenset()
    addresses: frozenset[IPAddress] = frozenset()
    loopback: bool = False
    any_address: bool = False

    @classmethod
    def bound_to(cls, host: str, allowed: Iterable[str] = ()) -> HostRule:
        """The rule of a server bound to ``host`` (as ``parse_http_address`` gives it) that also
        answers to the names and addresses ``allowed``."""
        entries = [host_entry(entry) for entry in allowed]
        names = {entry for entry in entries if isinstance(entry, str)}
        addresses = {entry for entry in entries if not isinstance(entry, str)}
        bound = host_entry(host)
        if bound == "localhost":
            return cls(frozenset(names), frozenset(addresses), loopback=True)
        if isinstance(bound, str):
            names.add(bound)
            return cls(frozenset(names), frozenset(addresses))
        if bound.is_unspecified:
            return cls(frozenset(names), frozenset(addresses), loopback=True, any_address=True)
        addresses.add(bound)
        return cls(frozenset(names), frozenset(addresses), loopback=bound.is_loopback)

    def allows(self, header: str | None) -> bool:
        host = host_of(header)
        if host is None:
            return False
        if isinstance(host, str):
            return host in self.names or (self.loopback and host == "localhost")
        if isinstance(host, ipaddress.IPv6Address) and host.ipv4_mapped is not None:
            host = host.ipv4_mapped
        return self.any_address or host in self.addresses or (self.loopback and host.is_loopback)


@dataclass
class HttpGuard:
    """The Host rule, who may come (None: anyone, on loopback) and whether /metrics asks too."""

    hosts: HostRule
    auth: WebAuth | None = None
    metrics_require_credential: bool = False
    refusals: RefusalLog = field(default_factory=RefusalLog)

    def install(self, app: web.Application) -> None:
        """Guard every request of ``app`` and put the security headers on every answer."""
        app[GUARD] = self
        app.middlewares.append(self._middleware)
        app.on_response_prepare.append(_add_security_headers)

    def asks_credential(self, path: str) -> bool:
        if self.auth is None or path in OPEN_PATHS or path.startswith(STATIC_PREFIX):
            return False
        return path != METRICS or self.metrics_require_credential

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        hosts = request.headers.getall(hdrs.HOST, [])
        # An absolute-form target (``GET http://name/``) names the host too (``request.host``).
        if len(hosts) != 1 or not all(map(self.hosts.allows, {hosts[0], request.host})):
            self.refusals.refused("host")
            return web.Response(status=421, text=MISDIRECTED)
        if self.auth is not None and self.asks_credential(request.path):
            principal = await self.auth.identify(request)
            if principal is not None:
                request[PRINCIPAL] = principal
            else:
                authorization = request.headers.get(hdrs.AUTHORIZATION)
                self.refusals.refused("credential" if authorization else "no_credential")
                if request.method == "GET" and _wants_page(request):
                    raise web.HTTPSeeOther("/login")
                return web.Response(
                    status=401,
                    text="credential required: log in at /login, or basic auth of a user\n",
                    headers={hdrs.WWW_AUTHENTICATE: CHALLENGE},
                )
        return await handler(request)


def _wants_page(request: web.BaseRequest) -> bool:
    """Whether a browser navigates there (its Accept asks for HTML first); a script, a stream or
    a scrape does not."""
    accept = request.headers.get(hdrs.ACCEPT, "")
    return accept.startswith("text/html") and request.path != "/events"


def principal_of(request: web.BaseRequest) -> Principal | None:
    """Who ``request`` comes from; None when nobody is asked (no users set) or nobody logged in."""
    return request.get(PRINCIPAL)


GUARD = web.AppKey("guard", HttpGuard)


async def _add_security_headers(request: web.BaseRequest, response: web.StreamResponse) -> None:
    add_security_headers(response.headers)


def add_security_headers(headers: MutableMapping[str, str]) -> None:
    """``SECURITY_HEADERS`` into ``headers``, leaving any an answer chose itself."""
    for name, value in SECURITY_HEADERS.items():
        headers.setdefault(name, value)


class HeaderedRequest(web.Request):
    """A request whose answer gets the security headers even when no application saw it: the 400
    aiohttp's parser answers to a malformed request skips the ``on_response_prepare`` signal (it
    runs for routed requests only), and the request's own hook is the one left."""

    async def _prepare_hook(self, response: web.StreamResponse) -> None:
        add_security_headers(response.headers)
        await super()._prepare_hook(response)


class ProtocolLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server log with the parser's refusals (a malformed request line or header, one
    too long) counted in ``refusals`` instead of told with a traceback each; everything else
    (a handler's exception: our bug) is logged as aiohttp logs it."""

    def __init__(self, logger: logging.Logger, refusals: RefusalLog) -> None:
        super().__init__(logger, {})
        self.refusals = refusals

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if isinstance(kwargs.get("exc_info"), HttpProcessingError):
            self.refusals.refused("malformed_request")
            return
        super().log(level, msg, *args, **kwargs)


def runner_arguments(app: web.Application) -> Mapping[str, Any]:
    """What ``web.AppRunner`` takes for ``app``'s guard: the server log above."""
    guard = app.get(GUARD)
    if guard is None:
        return {}
    return {"logger": ProtocolLog(logging.getLogger("aiohttp.server"), guard.refusals)}


def guard_unrouted(runner: web.AppRunner) -> None:
    """Make ``runner``'s server (set up, not yet started) build ``HeaderedRequest``s, so its
    parser's 400s carry the security headers too."""
    server = runner.server
    assert server is not None, "guard_unrouted before runner.setup()"
    server.request_factory = functools.partial(runner.app._make_request, _cls=HeaderedRequest)
