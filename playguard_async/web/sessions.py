"""Browser sessions of the web view: a login sets a cookie naming a session kept here, in this
replica's memory (a restart or another replica asks for the login again; basic auth works on
every replica).

A session id is 32 random bytes; the map is keyed by its SHA-256, so no lookup compares a guess
with a live id byte by byte. Each user holds at most ``SESSIONS_PER_USER`` sessions (their own
least recently used goes first), each for at most ``SESSION_AGE`` seconds and ``SESSION_IDLE``
without a request, and only while the user's line in the users file is the one it was opened
under. Each has its own CSRF token.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from playguard_async.web.users import WebUser

SESSION_COOKIE = "playguard_session"

SESSIONS_PER_USER = 20
"""Sessions one user may hold at once; a login past it ends that user's least recently used."""
SESSION_AGE = 12 * 3600.0
SESSION_IDLE = 3600.0


@dataclass
class Session:
    """One login: the users-file entry it was opened under (``WebUser``: name, role, hash), its
    CSRF token, when it began and when it was last used."""

    user: WebUser
    csrf: str
    started: float
    seen: float


def _key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).digest()


class Sessions:
    """The live sessions, each user's apart: a user's logins end only that user's sessions, so
    no one can log anyone else out by logging in many times. Memory is bounded by the users
    file: ``SESSIONS_PER_USER`` each."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._kept: dict[bytes, Session] = {}
        self._by_user: dict[str, OrderedDict[bytes, None]] = {}

    def open(self, user: WebUser) -> tuple[str, Session]:
        """A new session of ``user``: its id (the cookie's value) and the session. The user's
        sessions past ``SESSIONS_PER_USER`` end, least recently used first."""
        session_id = secrets.token_urlsafe(32)
        now = self.clock()
        session = Session(user, secrets.token_urlsafe(32), now, now)
        key = _key(session_id)
        self._kept[key] = session
        own = self._by_user.setdefault(user.name, OrderedDict())
        own[key] = None
        while len(own) > SESSIONS_PER_USER:
            oldest, _ = own.popitem(last=False)
            del self._kept[oldest]
        return session_id, session

    def find(self, session_id: str, current: Callable[[str], WebUser | None]) -> Session | None:
        """The live session of ``session_id`` (its idle time restarted); None when there is none,
        it is too old or idle too long, or its user's entry in the users file (``current``) is
        no longer the one it was opened under (the password, the role changed, the user removed
        or written anew): then it ends."""
        key = _key(session_id)
        session = self._kept.get(key)
        if session is None:
            return None
        now = self.clock()
        if (
            now - session.started > SESSION_AGE
            or now - session.seen > SESSION_IDLE
            or current(session.user.name) != session.user
        ):
            self._end(key)
            return None
        session.seen = now
        self._by_user[session.user.name].move_to_end(key)
        return session

    def close(self, session_id: str) -> None:
        self._end(_key(session_id))

    def held(self, name: str) -> int:
        """Sessions of user ``name`` kept now."""
        return len(self._by_user.get(name, ()))

    def _end(self, key: bytes) -> None:
        session = self._kept.pop(key, None)
        if session is None:
            return
        own = self._by_user[session.user.name]
        own.pop(key, None)
        if not own:
            del self._by_user[session.user.name]


def session_cookie(session_id: str, *, secure: bool) -> str:
    """The ``Set-Cookie`` value: script cannot read it, no other site's request carries it."""
    return f"{SESSION_COOKIE}={session_id}; HttpOnly; SameSite=Strict; Path=/" + (
        "; Secure" if secure else ""
    )


def cleared_cookie(*, secure: bool) -> str:
    return session_cookie("", secure=secure) + "; Max-Age=0"
