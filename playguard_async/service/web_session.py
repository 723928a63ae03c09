"""Browser sessions of the web view: a login sets a cookie naming a session kept here, in this
replica's memory (a restart or another replica asks for the login again; basic auth works on
every replica).

A session id is 32 random bytes; the map is keyed by its SHA-256, so no lookup compares a guess
with a live id byte by byte. It holds at most ``SESSIONS_KEPT`` sessions (the least recently
used goes first), each for at most ``SESSION_AGE`` seconds and ``SESSION_IDLE`` without a
request. Each has its own CSRF token.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

SESSION_COOKIE = "playguard_session"

SESSIONS_KEPT = 1_000
SESSION_AGE = 12 * 3600.0
SESSION_IDLE = 3600.0


@dataclass
class Session:
    user: str
    csrf: str
    started: float
    seen: float


def _key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).digest()


class Sessions:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._kept: OrderedDict[bytes, Session] = OrderedDict()

    def open(self, user: str) -> tuple[str, Session]:
        """A new session of ``user``: its id (the cookie's value) and the session."""
        session_id = secrets.token_urlsafe(32)
        now = self.clock()
        session = Session(user, secrets.token_urlsafe(32), now, now)
        self._kept[_key(session_id)] = session
        if len(self._kept) > SESSIONS_KEPT:
            self._kept.popitem(last=False)
        return session_id, session

    def find(self, session_id: str) -> Session | None:
        """The live session of ``session_id`` (its idle time restarted), None when there is none
        or it is too old or idle too long (then forgotten)."""
        key = _key(session_id)
        session = self._kept.get(key)
        if session is None:
            return None
        now = self.clock()
        if now - session.started > SESSION_AGE or now - session.seen > SESSION_IDLE:
            del self._kept[key]
            return None
        session.seen = now
        self._kept.move_to_end(key)
        return session

    def close(self, session_id: str) -> None:
        self._kept.pop(_key(session_id), None)


def session_cookie(session_id: str, *, secure: bool) -> str:
    """The ``Set-Cookie`` value: script cannot read it, no other site's request carries it."""
    return f"{SESSION_COOKIE}={session_id}; HttpOnly; SameSite=Strict; Path=/" + (
        "; Secure" if secure else ""
    )


def cleared_cookie(*, secure: bool) -> str:
    return session_cookie("", secure=secure) + "; Max-Age=0"
