"""Who a request of the web view comes from: a user of the users file (``web.users``),
by a login's session cookie (``web.sessions``) or by HTTP basic auth (scripts, curl,
Prometheus' ``basic_auth``), or a user a trusted auth proxy names.

A header is outside input down to its bytes: aiohttp hands over bytes that are not UTF-8 as lone
surrogates (``surrogateescape``). Every header, whatever its bytes, is therefore either a user or
a refusal, never an exception. A password is checked by argon2 in a thread (``PasswordCheck``):
the event loop never waits on it. Failed checks are counted per user name and per client address
(``FAILURES_PER_MINUTE`` each, shared with the login form; ``WebAuth.check``), each attempt before
its check, so however many come at once guessing costs the machine a bounded amount of argon2
work; past the limit nothing is checked for the rest of the minute.

The proxy (oauth2-proxy's ``X-Forwarded-User`` and ``X-Forwarded-Groups``) is believed only from
the addresses of ``web_trusted_proxies``; the role is the highest its groups map to in
``web_proxy_group_roles`` (none: refused). The same headers from any other peer are ignored, and
told in one log line per peer (at most ``UNTRUSTED_TOLD`` peers remembered).
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie

import structlog
from aiohttp import BasicAuth, hdrs, web

from playguard_async.kits.rate_limit import RateLimit
from playguard_async.web.sessions import SESSION_COOKIE, Session, Sessions
from playguard_async.web.users import (
    PasswordCheck,
    Role,
    UsersFile,
    VerifyRefused,
    WebUser,
)

log = structlog.get_logger("playguard.web")

CHALLENGE = 'Basic realm="playguard", charset="UTF-8"'
"""What a refusal asks for: basic auth, which a browser can answer by itself."""

PROXY_USER = "X-Forwarded-User"
PROXY_GROUPS = "X-Forwarded-Groups"

FAILURES_PER_MINUTE = 5
"""Failed password checks of one user name, and from one client address, a minute."""

GOOD_CLIENT_KEPT = 7 * 24 * 3600.0
"""Seconds a client a user logged in from stays exempt from the failures counted on the name."""

GOOD_CLIENTS_KEPT = 10_000
"""(user, client) pairs of good logins remembered at most (the least recently used forgotten)."""

UNTRUSTED_TOLD = 1_000
"""Peers whose proxy headers were ignored, remembered so each is logged once."""

NAME_SHOWN = 64
"""Characters of a user name from outside a log line quotes at most."""

_OWS = " \t"
"""HTTP's optional white space around a header's parts (not ``str.strip``'s Unicode idea of it)."""


def shown_name(name: str) -> str:
    """A user name from outside as a log line may quote it: bounded, escaped (``repr``)."""
    return repr(name[:NAME_SHOWN])


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: the name actions record, the role, and how it was told
    (``session``, ``basic``, ``proxy``); ``session`` is the login's, when there is one."""

    name: str
    role: Role
    via: str
    session: Session | None = None

    def may(self, role: Role) -> bool:
        return self.role >= role

    @property
    def identity(self) -> str:
        """Who this is for what is kept per user (the CSRF token, the action limit, the last
        results, what an action records as its doer): a user of the users file by name, a user
        a proxy names as ``proxy:NAME``, so the two are never one even when their names are
        (a users-file name cannot hold a colon)."""
        return f"proxy:{self.name}" if self.via == "proxy" else self.name


def offered_basic(authorization: str | None) -> tuple[str, str] | None:
    """The user name and password an ``Authorization: Basic`` header offers; None when the
    header is absent, of another scheme, malformed, or offers an empty name or password."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip(_OWS).partition(" ")
    value = value.strip(_OWS)
    if scheme.lower() != "basic" or not value:
        return None
    try:
        # ValueError covers a base64 that is not ASCII, malformed or without a colon, and a
        # user or password that is not UTF-8 (UnicodeError is a ValueError).
        offered = BasicAuth.decode(f"Basic {value}", encoding="utf-8")
    except ValueError:
        return None
    if not offered.login or not offered.password:
        return None
    return offered.login, offered.password


def still_there(request: web.BaseRequest) -> Callable[[], bool]:
    """Whether ``request``'s client is still connected (aiohttp does not cancel a handler whose
    client left): work for one that left is not worth doing."""

    def connected() -> bool:
        transport = request.transport
        return transport is not None and not transport.is_closing()

    return connected


def session_id_of(request: web.BaseRequest) -> str | None:
    """The session cookie's value, None when there is none (or the Cookie header is malformed)."""
    header = request.headers.get(hdrs.COOKIE)
    if not header:
        return None
    try:
        cookie = SimpleCookie(header)
    except CookieError:
        return None
    morsel = cookie.get(SESSION_COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxy:
    """The peers whose ``X-Forwarded-User`` is believed, and the roles their groups map to."""

    def __init__(self, networks: Iterable[str], group_roles: Mapping[str, str]) -> None:
        self.networks: tuple[Network, ...] = tuple(
            ipaddress.ip_network(network, strict=False) for network in networks
        )
        self.group_roles = {
            group: role for group, name in group_roles.items() if (role := Role.named(name))
        }
        self._told: OrderedDict[str, None] = OrderedDict()

    def trusts(self, peer: str | None) -> bool:
        try:
            address = ipaddress.ip_address(peer or "")
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)

    def principal(self, request: web.BaseRequest) -> Principal | None:
        """The user the proxy names, when ``request`` comes from a trusted peer and carries one
        whose groups map to a role; None otherwise (an untrusted peer's headers told once)."""
        user = request.headers.get(PROXY_USER)
        if user is None and PROXY_GROUPS not in request.headers:
            return None
        if not self.trusts(request.remote):
            self._tell_untrusted(request.remote or "unknown", user)
            return None
        if not user or len(user) > NAME_SHOWN or not user.isprintable():
            return None
        groups = request.headers.get(PROXY_GROUPS, "").split(",")
        roles = [self.group_roles[g.strip()] for g in groups if g.strip() in self.group_roles]
        return Principal(user, max(roles), "proxy") if roles else None

    def _tell_untrusted(self, peer: str, user: str | None) -> None:
        if peer in self._told:
            return
        self._told[peer] = None
        if len(self._told) > UNTRUSTED_TOLD:
            self._told.popitem(last=False)
        log.warning(
            "web.proxy_header_ignored",
            peer=peer,
            user=None if user is None else shown_name(user),
            why="not an address of web_trusted_proxies",
        )


@dataclass(frozen=True)
class Refused:
    """Why a name and password did not let anyone in: ``limited`` (too many failures of the name
    or from the client this minute; ``retry_after`` seconds), ``busy`` (too many checks waiting),
    ``gone`` (the client left before its turn) or ``wrong`` (checked: not that user's password)."""

    why: str
    retry_after: int | None = None


class WebAuth:
    """Who a request comes from, by (in this order) a trusted proxy's headers, a session cookie,
    basic auth. ``users`` None: no users file (a proxy only)."""

    def __init__(
        self,
        users: UsersFile | None,
        *,
        proxy: TrustedProxy | None = None,
        secure_cookie: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.users = users
        self.proxy = proxy
        self.secure_cookie = secure_cookie
        self.clock = clock
        self.passwords = PasswordCheck()
        self.sessions = Sessions()
        self.failures_by_user = RateLimit(FAILURES_PER_MINUTE, 60.0, clock=clock)
        self.failures_by_client = RateLimit(FAILURES_PER_MINUTE, 60.0, clock=clock)
        self._good_clients: OrderedDict[tuple[str, str], float] = OrderedDict()

    def client_of(self, request: web.BaseRequest) -> str:
        """The client address a request's failures are counted on: the peer, or when the peer is
        a trusted proxy the address it forwards for (``X-Forwarded-For``, the nearest one that
        is not itself a trusted proxy), so clients behind the proxy are not one client."""
        peer = request.remote or "unknown"
        if self.proxy is None or not self.proxy.trusts(peer):
            return peer
        forwarded = ",".join(request.headers.getall(hdrs.X_FORWARDED_FOR, []))
        for hop in reversed(forwarded.split(",")):
            try:
                address = str(ipaddress.ip_address(hop.strip(_OWS)))
            except ValueError:
                return peer  # a hop we cannot read: the proxy's own address, shared by all
            if not self.proxy.trusts(address):
                return address
        return peer

    def _good_client(self, name: str, client: str) -> bool:
        """Whether ``name`` logged in from ``client`` within ``GOOD_CLIENT_KEPT`` seconds."""
        seen = self._good_clients.get((name, client))
        return seen is not None and self.clock() - seen < GOOD_CLIENT_KEPT

    def failures_wait(self, name: str, client: str) -> int | None:
        """Seconds until ``name`` from ``client`` may be checked again; None: now. The name's own
        count does not hold back a client it logged in from lately: guesses at a name from
        elsewhere cannot lock its user out of their own machine."""
        by_client = self.failures_by_client.retry_after(client)
        if by_client is not None or self._good_client(name, client):
            return by_client
        return self.failures_by_user.retry_after(name)

    async def check(
        self, name: str, password: str, client: str, *, wanted: Callable[[], bool] = lambda: True
    ) -> WebUser | Refused:
        """The user ``name`` when ``password`` is theirs, else why not (``Refused``).

        A pair verified before is let in whatever the counts (a neighbour's wrong guesses do not
        lock out a script or a scrape that has the password). Any other attempt is counted
        against the name and the client *before* its password is checked, so however many come
        at once, at most ``FAILURES_PER_MINUTE`` of a name or a client are checked a minute; one
        that succeeds (or is not checked: busy, client gone) is taken back."""
        user = None if self.users is None else self.users.user(name)
        if user is not None and self.passwords.known(user, password):
            return user
        wait = self.failures_wait(name, client)
        if wait is not None:
            return Refused("limited", wait)
        self.failures_by_user.note(name)
        self.failures_by_client.note(client)
        try:
            ok = await self.passwords.verify(user, password, wanted=wanted)
        except VerifyRefused as exc:
            ok, refusal = False, Refused(exc.why)
        else:
            refusal = Refused("wrong")
        if ok and user is not None:
            self._good_clients[name, client] = self.clock()
            self._good_clients.move_to_end((name, client))
            if len(self._good_clients) > GOOD_CLIENTS_KEPT:
                self._good_clients.popitem(last=False)
        if (ok and user is not None) or refusal.why != "wrong":
            self.failures_by_user.refund(name)
            self.failures_by_client.refund(client)
        return user if ok and user is not None else refusal

    async def identify(self, request: web.BaseRequest) -> Principal | None:
        if self.proxy is not None and (principal := self.proxy.principal(request)) is not None:
            return principal
        session_id = session_id_of(request)
        if session_id is not None and self.users is not None:
            session = self.sessions.find(session_id, self.users.user)
            if session is not None:
                return Principal(session.user.name, session.user.role, "session", session)
        offered = offered_basic(request.headers.get(hdrs.AUTHORIZATION))
        if offered is None or self.users is None:
            return None
        checked = await self.check(*offered, self.client_of(request), wanted=still_there(request))
        if isinstance(checked, Refused):
            return None
        return Principal(checked.name, checked.role, "basic")

    def secure(self, request: web.BaseRequest) -> bool:
        """Whether the session cookie is marked ``Secure``: over TLS, or when set so."""
        return self.secure_cookie or request.secure
