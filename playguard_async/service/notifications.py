"""Told once: a Marquee that goes bad, comes back, loses its lock or has a write refused is sent
to a webhook and logged, once per change, whichever replica ran the cycle.

Two kinds of news, kept apart because they repeat differently:

- a change of health (``failing``, ``recovered``, ``drifted``, ``paused``, ``resumed``): each
  Marquee's health is one Redis key, swapped with ``SET ... GET`` at the end of every cycle that
  says something about it, so exactly one cycle (on whichever replica) sees each change, and a
  Marquee that keeps failing (or drifting in ``detect``, or paused) is told once;
- an event (``lock_lost``, ``fenced``): every occurrence is news, but several replicas can see the
  same one (a frozen holder and its successor), so ``once()`` on a fingerprint of (Marquee, event,
  reason) lets one of them through per ``notify_window``; and ``rollout_halted``, sent by the one
  cycle whose failure halted a rollout (the halt is a compare-and-set: no other cycle sees it
  happen), its reason the scope and why; and ``rollback_blocked``, a rollback that cannot have a
  part of its revision, told by the one cycle that first finds it (``coordination.told``), its
  reason the Playground and what is missing.

Sending never holds up a cycle or a lock's release: the cycle's listener only decides and queues;
one background task posts, each attempt bounded by ``webhook_timeout``, retried ``webhook_retries``
times. A full queue drops the oldest news and says so. With ``webhook_secret`` set, the body is
signed (HMAC-SHA256) in ``X-Playguard-Signature: sha256=<hex>`` so the receiver can tell it from a
forgery.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
from collections import deque
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import structlog
from redis.exceptions import ResponseError

from playguard_async import __version__
from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.foreign import is_wrong_type
from playguard_async.coordination.keys import health_key, once_key
from playguard_async.coordination.lock import DEFAULT_TIMEOUT, LockUnavailable
from playguard_async.cycle_record import NoticeKind
from playguard_async.engine.results import CycleResult
from playguard_async.kits.aio import bounded
from playguard_async.kits.vocabulary import Cause
from playguard_async.phases.causes import CHANGE_NOTICES
from playguard_async.settings import Settings

log = structlog.get_logger("playguard.notify")

SILENT = frozenset({"locked", "interrupted"})
"""Outcomes that say nothing about a Marquee's health: another replica had it, or we stopped."""

QUEUE_LIMIT = 1000
"""News waiting to be posted; past it the oldest is dropped (a receiver away for long)."""

BACKOFF = 0.5
"""Seconds before the first retry; each retry waits twice the one before."""


_TOLD_AS_IS = frozenset({NoticeKind.ROLLOUT_HALTED.value, NoticeKind.ROLLBACK_BLOCKED.value})
"""Notices their phase gives once (not every cycle that finds the same), so each is news."""

_CHANGE_KINDS = frozenset(
    {kind.value for kind in CHANGE_NOTICES.values()} | {NoticeKind.ROLLED_BACK.value}
)
_RELEASE_PHASES = frozenset({"sync_git", "pull_images", "reconcile_playgrounds"})

HEALTHS = frozenset({b"ok", b"failing", b"drifted", b"release_pending", b"paused"})
"""The values this project writes to a health key; any other reads as never recorded."""


def news_of(result: CycleResult) -> tuple[str | None, str | None]:
    """What a cycle says: the health it shows (``ok``, ``failing``, ``drifted``,
    ``release_pending``, ``paused``, None) and an event (or None). ``drifted`` is a dry run
    (``detect``, or a cycle outside its maintenance windows) that ended ok with changes it would
    have made, ``release_pending`` one whose every change is a release (a new commit, an image
    behind a tag, a setting: the desired state moved, the host did not): each told once when
    found, not at every cycle that finds it again. A release waiting read as drift before."""
    outcome = result.outcome.value
    if outcome in SILENT:
        return None, None
    if outcome == "lock_lost":
        return None, "fenced" if result.reason == "fenced" else "lock_lost"
    if outcome == "paused":
        return "paused", None
    if outcome != "ok":
        return "failing", None
    if not (result.dry_run and any(result.actions.values())):
        return "ok", None
    return ("release_pending" if _only_releases(result) else "drifted"), None


def _only_releases(result: CycleResult) -> bool:
    """Whether the changes a dry run found are releases, all of them: at least one change
    notice, every one a release's, and no action but those a release takes (a checkout moved,
    an image pulled, a Playground brought up). A change no notice explains (an orphan to
    sweep, an agent chat to start) reads as drift, as before."""
    kinds = [
        notice["kind"]
        for notices in result.notices.values()
        for notice in notices
        if notice["kind"] in _CHANGE_KINDS
    ]
    acted = {phase for phase, taken in result.actions.items() if taken}
    release = NoticeKind.RELEASE.value
    return bool(kinds) and acted <= _RELEASE_PHASES and all(kind == release for kind in kinds)


def causes_of(result: CycleResult) -> list[str]:
    """Why the cycle changed (or in a dry run would change) each Playground, in the glossary's
    words (``release web-1: commit 81fc54f -> 3491e24``, ``drift web-1: app: missing``,
    ``rollback web-1: ...``), so that a ``drifted`` detect Marquee says whether it is a release
    waiting or a host that moved."""
    words = {notice.value: cause.word for cause, notice in CHANGE_NOTICES.items()}
    words[NoticeKind.ROLLED_BACK.value] = Cause.ROLLBACK.word
    return [
        f"{words[notice['kind']]} {notice['subject']}: {notice['detail']}"
        for notices in result.notices.values()
        for notice in notices
        if notice["kind"] in words
    ]


def fingerprint(marquee: str, event: str, reason: str | None) -> str:
    text = "\0".join((marquee, event, reason or ""))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def origin_of(url: str) -> str:
    """What of a webhook URL may be logged: its path and query often carry the receiver's token."""
    parts = urlsplit(url)
    return (
        f"{parts.scheme}://{parts.hostname}:{parts.port}"
        if parts.port
        else f"{parts.scheme}://{parts.hostname}"
    )


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def once(
    redis: RedisClient, name: str, ttl: float, *, timeout: float = DEFAULT_TIMEOUT
) -> bool:
    """True the first time ``name`` is seen within ``ttl`` seconds, False after that.

    The light guard for "don't fire this twice": a plain NX key, no token, no renewal. A Redis error
    propagates (as ``LockUnavailable``), so the caller decides whether not firing is the safe side.
    """
    ttl_ms = max(1, round(ttl * 1000))
    try:
        created = await bounded(timeout, redis.set(once_key(name), "1", nx=True, px=ttl_ms))
    except Exception as exc:
        raise LockUnavailable(name) from exc
    return bool(created)


class ChangeNotifier:
    """The daemon's cycle listener for notifications (``notify_cycle``) and their sender."""

    def __init__(self, settings: Settings, redis: RedisClient) -> None:
        self.url = settings.webhook_url.get_secret_value() if settings.webhook_url else ""
        self.origin = origin_of(self.url)
        self.secret = (
            settings.webhook_secret.get_secret_value() if settings.webhook_secret else None
        )
        self.timeout = settings.webhook_timeout
        self.retries = settings.webhook_retries
        self.window = settings.notify_window
        self.replica = settings.replica_id
        self.redis = redis
        self.redis_timeout = settings.redis_socket_timeout
        self.waiting: deque[dict[str, Any]] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.dropped = 0

    async def _swap_health(self, marquee: str, health: str) -> bytes | None:
        """Store ``marquee``'s ``health``; the one it had, None when never recorded or when the
        key held a value this project did not write (of any type: the key is this method's to
        write, so one of another type is replaced, as if never recorded)."""
        key = health_key(marquee)
        try:
            previous = await bounded(self.redis_timeout, self.redis.set(key, health, get=True))
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            await bounded(self.redis_timeout, self.redis.set(key, health))
            return None
        return previous if previous in HEALTHS else None

    async def notify_cycle(self, result: CycleResult) -> None:
        """Decide whether ``result`` is news and queue it; a Redis error is the caller's to log."""
        health, event = news_of(result)
        if health is not None:
            previous = await self._swap_health(result.marquee, health)
            if health == "failing" and previous != b"failing":
                self._queue("failing", result)
            elif health in ("drifted", "release_pending") and previous != health.encode():
                self._queue(health, result)
            elif health == "paused" and previous != b"paused":
                self._queue("paused", result)
            elif health != "paused" and previous == b"paused":
                self._queue("resumed", result)
            elif health != "failing" and previous == b"failing":
                self._queue("recovered", result)
        if event is not None:
            key = f"notify:{fingerprint(result.marquee, event, result.reason)}"
            if await once(self.redis, key, self.window, timeout=self.redis_timeout):
                self._queue(event, result)
        for notices in result.notices.values():
            for notice in notices:
                if notice["kind"] in _TOLD_AS_IS:
                    # One cycle alone halts a rollout (its compare-and-set), or first finds a
                    # rollback blocked (``coordination.told``): told once as is.
                    self._queue(notice["kind"], result, reason=f"{notice['subject']}: "
                                f"{notice['detail']}")  # fmt: skip

    def _queue(self, transition: str, result: CycleResult, *, reason: str | None = None) -> None:
        news = {
            "marquee": result.marquee,
            "transition": transition,
            "outcome": result.outcome.value,
            "reason": result.reason if reason is None else reason,
            "phase": result.phase,
            "fence": result.fence,
            "replica": self.replica,
            "cycle": result.cycle_id,
            "at": datetime.fromtimestamp(result.finished_at or 0, UTC).isoformat(),
            "causes": causes_of(result),
        }
        log.warning(
            "marquee.transition",
            transition=transition,
            outcome=news["outcome"],
            reason=news["reason"],
        )
        if not self.url:
            return
        if len(self.waiting) >= QUEUE_LIMIT:
            self.waiting.popleft()
            self.dropped += 1
            log.error("notify.dropped", dropped=self.dropped, limit=QUEUE_LIMIT)
        self.waiting.append(news)
        self._idle.clear()
        self._wake.set()

    @contextlib.asynccontextmanager
    async def sending(self, *, drain: float) -> AsyncIterator[None]:
        """Post queued news for as long as the block lasts, then up to ``drain`` seconds more."""
        if not self.url:
            yield
            return
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            headers={"User-Agent": f"playguard/{__version__}"},
        ) as session:
            sender = asyncio.create_task(self._send_forever(session), name="notify:send")
            try:
                yield
            finally:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(drain):
                        await self._idle.wait()
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
                if self.waiting:
                    log.warning("notify.unsent", waiting=len(self.waiting))

    async def _send_forever(self, session: aiohttp.ClientSession) -> None:
        while True:
            if not self.waiting:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            news = self.waiting[0]
            await self._post(session, news)
            if self.waiting and self.waiting[0] is news:
                self.waiting.popleft()

    async def _post(self, session: aiohttp.ClientSession, news: Mapping[str, Any]) -> None:
        body = json.dumps(news, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "X-Playguard-Event": news["transition"]}
        if self.secret:
            headers["X-Playguard-Signature"] = signature(self.secret, body)
        error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(BACKOFF * 2 ** (attempt - 1))
            try:
                async with session.post(self.url, data=body, headers=headers) as response:
                    if 200 <= response.status < 300:
                        log.info("notify.sent", marquee=news["marquee"], attempts=attempt + 1)
                        return
                    error = f"HTTP {response.status}"
                    if 400 <= response.status < 500 and response.status != 429:
                        break  # the receiver refuses this news; sending it again changes nothing
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                error = error.replace(self.url, self.origin)
        log.error(
            "notify.failed",
            marquee=news["marquee"],
            transition=news["transition"],
            url=self.origin,
            error=error,
        )
