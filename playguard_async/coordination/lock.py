"""The token lock: a fenced lease on a name in Redis, never two holders at once.

A lock is one Redis key holding a record written at acquisition (a fresh uuid4 token and who holds
it). Renew and release compare that exact record inside Lua, so a holder whose lease lapsed can
neither extend nor delete the key of the holder that came after it. Each acquisition also increments
a fence counter that outlives the lock, so each lease carries a number that grows strictly per name:
a host that remembers the highest fence it has seen can refuse a write from an older lease.

An acquire arrives late or not at all: a command the client gave up on can still sit in a dead
connection's TCP send queue and be delivered by the kernel's next retransmission, after the client
deleted what it might have written. So each acquire carries the moment after which it must not run,
on Redis's own clock (converted from a TIME read on the connection that carries it), and the
acquiring script refuses itself past that moment; the client's clean-up waits for that moment too.
See ``lock_scripts.ACQUIRE_SCRIPT``.

Every script call leaves through the lock's ``sender`` (``client.sender_for``): the command
channel, a pool connection, or a pool connection followed by WAIT for ``min_replicas``.

Uncertainty is loss: any error while renewing, including a Redis that does not answer in time,
raises ``LockLost`` rather than letting work continue on a lease we cannot prove is ours.

A lock may be given a hold key in its slot: its scripts then read it, so an acquire refuses to
take the lock while it has a value and a renewal says so, both as ``LockHeld``, in the round trips
the lock makes anyway. The lock reads no meaning into the value: that is for whoever gave it the
key. A hold key of another type than a string (a hash, a list...) holds too, as a key the lock
cannot read is not a go-ahead. A lock without one is never held back.

A lock key of another type is another holder's (an acquire finds it held, a renewal ``stolen``,
a release leaves it); a fence counter of another type is dropped at the next acquire like any
other counter that is not a number. No script fails on a key's type.

All keys of one name share the hash tag ``{name}``, so every script touches a single cluster slot.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from redis.exceptions import ConnectionError as RedisConnectionError
from structlog.typing import FilteringBoundLogger

from playguard_async.coordination.client import (
    RedisClient,
    ScriptCall,
    Unreplicated,
    script_value,
    sender_for,
)
from playguard_async.coordination.keys import fence_key, lock_key
from playguard_async.coordination.lock_record import new_record
from playguard_async.coordination.lock_scripts import LATE, hold_value, is_hold, scripts_of
from playguard_async.kits.aio import bounded, detached

log = structlog.get_logger("playguard.lock")

LossReason = Literal["expired", "stolen", "unreachable", "fenced", "unreplicated"]

DEFAULT_TIMEOUT = 5.0
"""Bound on every Redis round trip made by the lock, in seconds."""

DEFAULT_DRIFT_FACTOR = 0.01
"""Share of the ttl subtracted from a lease's deadline for clock-rate drift between us and Redis."""

_DRIFT_FLOOR = 0.002


class LockError(Exception):
    """Base of the lock's own errors."""


class LockLost(LockError):
    """The lease can no longer be proven ours; no further guarded work may start.

    ``reason`` is ``expired`` (the key is gone), ``stolen`` (another token holds it),
    ``unreachable`` (Redis did not answer correctly in time; the original error is chained),
    ``fenced`` (the host refused a write: it had accepted a newer fence than this lease's) or
    ``unreplicated`` (fewer replicas than ``min_replicas`` acknowledged the renewal in time).
    """

    def __init__(self, name: str, reason: LossReason) -> None:
        super().__init__(f"lock {name!r} lost: {reason}")
        self.name = name
        self.reason: LossReason = reason


class LockHeld(LockError):
    """The lock's hold key (``TokenLock(hold_key=...)``) has a value: the work the lock guards is
    held back. From ``TokenLock.acquire``: nothing was taken. From ``Lease.renew``: the lease was
    renewed all the same and is still held, for the caller to release. ``value`` is the key's
    exact value, outside input: whoever reads it must expect anything; None when the key holds
    another type than a string, named by ``foreign_type`` (Redis's TYPE)."""

    def __init__(
        self, name: str, value: bytes | str | None, foreign_type: str | None = None
    ) -> None:
        super().__init__(f"lock {name!r} held back")
        self.name = name
        self.value = value
        self.foreign_type = foreign_type


class LockUnavailable(LockError):
    """Redis could not be reached to acquire; whether the lock is free is unknown."""

    def __init__(self, name: str) -> None:
        super().__init__(f"lock {name!r}: Redis unavailable")
        self.name = name


class ReleaseResult(enum.Enum):
    """What a release found; never an exception, so it cannot mask the error that ended the work."""

    RELEASED = "released"
    EXPIRED = "expired"
    STOLEN = "stolen"
    UNKNOWN = "unknown"


def release_result(answer: object) -> ReleaseResult:
    """RELEASE_SCRIPT's answer as a ``ReleaseResult``: only a 1 is a release."""
    if answer == 1:
        return ReleaseResult.RELEASED
    return ReleaseResult.EXPIRED if answer == 0 else ReleaseResult.STOLEN


def default_replica_id() -> str:
    """This process's name in lock records when none is configured: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


@dataclass(eq=False)
class Lease:
    """Proof, renewed phase after phase, that this process holds one lock.

    ``deadline`` is on the ``time.monotonic()`` clock: the moment before the acquiring (or renewing)
    command was sent, plus the ttl, minus the drift margin. Guarded work must be over by then.
    """

    lock: TokenLock
    token: str
    fence: int
    deadline: float
    record: str = field(repr=False)
    _released: ReleaseResult | None = field(default=None, init=False, repr=False)
    _releasing: asyncio.Future[Any] | None = field(default=None, init=False, repr=False)
    _log: FilteringBoundLogger = field(init=False, repr=False)
    """Bound once to the lock's name and this fence: structlog's module-level proxy cost more
    per line than a renewal's own work."""
    _renewal: ScriptCall | None = field(default=None, init=False, repr=False)
    """The renewal as the lock's sender sends it, built once per lease (it never changes)."""

    def __post_init__(self) -> None:
        self._log = log.bind(lock=self.lock.name, fence=self.fence)

    @property
    def name(self) -> str:
        return self.lock.name

    def remaining(self) -> float:
        """Seconds until ``deadline``; negative once it has passed."""
        return self.deadline - time.monotonic()

    async def renew(self) -> None:
        """Put the ttl back to full, or raise ``LockLost``.

        A mismatch, a missing key, a Redis error or a Redis that does not answer within the lock's
        timeout all mean the same thing to the caller: stop, this lease is not provably ours.
        Renewed while the lock's hold key has a value, it raises ``LockHeld``, the lease still
        held: the same round trip renews and tells the caller to stop.
        """
        if self._released is not None:
            raise RuntimeError(f"lease on {self.name!r} was already released")
        lock = self.lock
        if self._renewal is None:
            self._renewal = lock.sender.prepare(
                lock.scripts.renew, lock.keys_with_hold(lock.key), [self.record, lock.ttl_ms],
                replicated=True,
            )  # fmt: skip
        sent = time.monotonic()
        try:
            answer = await lock.sender.call(self._renewal)
        except Exception as exc:
            self._log.warning("lock.lost", reason="unreachable", error=repr(exc))
            raise LockLost(self.name, "unreachable") from exc
        if answer == 1:  # an Unreplicated answer is never equal to 1
            self.deadline = lock.deadline_from(sent)
            self._log.debug("lock.renewed")
            return
        outcome = script_value(answer)
        renewed = outcome == 1 or is_hold(outcome)
        if renewed and isinstance(answer, Unreplicated):
            self._log.warning(
                "lock.lost", reason="unreplicated", acknowledged=answer.acknowledged,
                wanted=lock.min_replicas,
            )  # fmt: skip
            raise LockLost(self.name, "unreplicated")
        if renewed:
            self.deadline = lock.deadline_from(sent)
            self._log.debug("lock.renewed")
            raise LockHeld(self.name, *hold_value(outcome))
        reason: LossReason = "expired" if outcome == 0 else "stolen"
        self._log.warning("lock.lost", reason=reason)
        raise LockLost(self.name, reason)

    async def release(self) -> ReleaseResult:
        """Delete the key if it still holds our record. Never raises an error.

        The compare-and-delete goes out whatever the caller does (``TokenLock.delete_record``),
        so cancelling the caller does not cancel the release: it finishes,
        bounded by the lock's timeout, and the cancellation still propagates. A second call
        waits for the same answer; once settled, it returns the result without asking Redis.
        """
        if self._released is not None:
            return self._released
        if self._releasing is None:
            self._releasing = self.lock.delete_record(self.record)
            self._releasing.add_done_callback(self._settle_late)
        try:
            await bounded(self.lock.timeout, asyncio.shield(self._releasing))
        except Exception as exc:
            self._log.debug("lock.release_unknown", error=repr(exc))
        if self._releasing.done():
            self._settle_late(self._releasing)  # an answer in whose callback has not yet run
        return self._released or self._settled(ReleaseResult.UNKNOWN)

    def _settle_late(self, answer: asyncio.Future[Any]) -> None:
        """Settle from the release's answer, also when nobody waits for it any more."""
        if answer.cancelled() or answer.exception() is not None:
            result = ReleaseResult.UNKNOWN
        else:
            result = release_result(answer.result())
        if self._released is None:
            self._settled(result)

    def release_command(self) -> tuple[str | int, ...]:
        """This lease's compare-and-delete as a command for a batch that ends the cycle in one
        round trip; hand its answer to ``release_answered``. A plain EVALSHA: redis-py's Cluster
        pipeline refuses its ``evalsha`` method (for fear of a script missing on some node), so
        a NOSCRIPT answer is the batch's to handle: ``release()`` sends the script whole."""
        lock = self.lock
        return ("EVALSHA", lock.scripts.release.sha, 1, lock.key, self.record)

    def release_answered(self, answer: object) -> ReleaseResult:
        """What the compare-and-delete of ``release_command`` found, from its answer: the
        script's number, or the exception of the command or of the whole pipeline (then
        ``UNKNOWN``: it may have landed or not, and never reads as released). Never raises; once
        the lease is settled (by this or by ``release()``), the first result whatever the
        answer."""
        if self._released is not None:
            return self._released
        if isinstance(answer, BaseException):
            self._log.debug("lock.release_unknown", error=repr(answer))
            return self._settled(ReleaseResult.UNKNOWN)
        return self._settled(release_result(answer))

    def _settled(self, result: ReleaseResult) -> ReleaseResult:
        self._released = result
        # Unknown: the key may stand until its ttl, holding the name that long.
        self._log.log(
            logging.WARNING if result is ReleaseResult.UNKNOWN else logging.DEBUG,
            "lock.released", result=result.value,
        )  # fmt: skip
        return result


class TokenLock:
    """A named lock in Redis taken with ``acquire()`` and held through a ``Lease``.

    One TokenLock may hand out many leases over time; nothing about a lease is stored on the lock,
    so concurrent tasks never share token state.
    """

    def __init__(
        self,
        redis: RedisClient,
        name: str,
        ttl: float = 900.0,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        drift_factor: float = DEFAULT_DRIFT_FACTOR,
        replica: str | None = None,
        min_replicas: int = 0,
        replica_timeout: float = 0.5,
        hold_key: str | None = None,
    ) -> None:
        """``hold_key``: a key in the lock's hash slot whose value, while it has one, holds the
        lock's work back (``LockHeld``), read by the lock's own scripts, so in the round trips
        the lock makes anyway. Without it nothing holds the lock back."""
        if ttl <= 0:
            raise ValueError(f"lock {name!r}: ttl must be positive seconds, got {ttl!r}")
        if timeout <= 0:
            raise ValueError(f"lock {name!r}: timeout must be positive seconds, got {timeout!r}")
        if not 0 <= drift_factor < 0.5:
            raise ValueError(
                f"lock {name!r}: drift_factor must be in [0, 0.5), got {drift_factor!r}"
            )
        if min_replicas < 0:
            raise ValueError(f"lock {name!r}: min_replicas must be 0 or more, got {min_replicas!r}")
        if min_replicas and not 0 < replica_timeout * 2 < timeout:
            raise ValueError(
                f"lock {name!r}: replica_timeout must be in (0, timeout/2={timeout / 2!r}) (a "
                f"NOSCRIPT answer costs a second wait), got {replica_timeout!r}"
            )
        self.redis = redis
        self.name = name
        self.min_replicas = min_replicas
        self.replica_timeout = replica_timeout
        self.ttl = ttl
        self.ttl_ms = _ms(ttl)
        self.timeout = timeout
        self.drift = ttl * drift_factor + _DRIFT_FLOOR
        self.replica = replica or default_replica_id()
        self.key = lock_key(name)
        self.fence_key = fence_key(name)
        self.hold_key = hold_key
        self.scripts = scripts_of(redis)
        self.sender = sender_for(
            redis, timeout=timeout, min_replicas=min_replicas, replica_timeout=replica_timeout
        )

    def delete_record(self, record: str | bytes) -> asyncio.Future[Any]:
        """Start the compare-and-delete of ``record``: it runs to its end whatever its caller
        does, bounded by the lock's timeout. The one way a lease is released outside a cycle's
        ending, and an abandoned acquisition undone."""
        return self.sender.call(
            self.sender.prepare(self.scripts.release, [self.key], [record]), patient=True
        )

    def keys_with_hold(self, *keys: str) -> list[str]:
        """A script's ``keys``, followed by the hold key when the lock has one."""
        return [*keys, self.hold_key] if self.hold_key is not None else list(keys)

    def deadline_from(self, sent: float) -> float:
        return sent + self.ttl - self.drift

    async def acquire(self) -> Lease | None:
        """Take the lock at once or return None; never waits for another holder.

        Raises ``LockHeld``, having taken nothing, while the hold key (if the lock has one) has a
        value, whoever holds the lock.
        Raises ``LockUnavailable`` when Redis cannot be reached. If the call is cancelled, or times
        out, after the command may have landed, our own record is deleted again (compare-and-delete,
        so nobody else's), once Redis would refuse the command (``lock_scripts.ACQUIRE_SCRIPT``).
        """
        token, record = new_record(self.replica)
        sent = time.monotonic()
        not_after = sent + self.timeout
        # The round trip runs on regardless of this caller, so that an abandoned acquisition can
        # be undone once its answer shows whether the SET landed: a compare-and-delete sent
        # before that answer could overtake the SET on another connection.
        attempt = self.sender.call(
            self.sender.prepare(
                self.scripts.acquire, self.keys_with_hold(self.key, self.fence_key),
                [record, self.ttl_ms], replicated=True,
            ),
            not_after=not_after,
        )  # fmt: skip
        try:
            answer = await self.sender.outlasting(attempt)
        except asyncio.CancelledError:
            attempt.add_done_callback(lambda done: self._undo(done, record, not_after))
            raise
        except Exception as exc:
            attempt.add_done_callback(lambda done: self._undo(done, record, not_after))
            # Raised to the caller, who says it (the engine once per outage): debug only here.
            log.debug("lock.unavailable", lock=self.name, error=repr(exc))
            raise LockUnavailable(self.name) from exc
        fence = script_value(answer)
        if fence == LATE:
            # Answered in time, yet Redis's clock had passed the stamp: it stepped forward since
            # TIME was read. Nothing was written; the next read sets the stamp right.
            log.warning("lock.acquire_late", lock=self.name)
            raise LockUnavailable(self.name)
        if is_hold(fence):
            log.debug("lock.held", lock=self.name)
            raise LockHeld(self.name, *hold_value(fence))
        if fence is None:
            log.debug("lock.busy", lock=self.name)
            return None
        if isinstance(answer, Unreplicated):
            # Not held: a failover now could hand the name to a second holder. Take it back.
            result = await detached(self.compare_and_delete(record))
            log.warning(
                "lock.unreplicated", lock=self.name, fence=int(fence),
                acknowledged=answer.acknowledged, wanted=self.min_replicas, result=result.value,
            )  # fmt: skip
            return None
        lease = Lease(
            self, token=token, fence=int(fence), deadline=self.deadline_from(sent), record=record
        )
        lease._log.debug("lock.acquired", ttl=self.ttl)
        return lease

    def _undo(self, attempt: asyncio.Future[Any], record: str, not_after: float) -> None:
        """Delete what an abandoned acquisition may have written, once its answer is in, or,
        without an answer, once ``not_after`` has passed: before it the command may still land
        (a batch can fail early with its bytes still in the kernel's send queue), after it
        Redis refuses it, so the delete cannot be overtaken."""
        if not attempt.cancelled() and attempt.exception() is None:
            fence = script_value(attempt.result())
            if fence is None or fence == LATE or is_hold(fence):
                return  # refused: nothing of ours was written
            self._send_undo(record)
            return
        asyncio.get_running_loop().call_at(not_after, self._send_undo, record)

    def _send_undo(self, record: str) -> None:
        try:
            undo = self.delete_record(record)
        except RedisConnectionError as exc:  # the channel closed meanwhile: the ttl ends the key
            unknown = ReleaseResult.UNKNOWN.value
            log.debug("lock.acquire_undone", lock=self.name, result=unknown, error=repr(exc))
            return
        undo.add_done_callback(self._log_undone)

    def _log_undone(self, undo: asyncio.Future[Any]) -> None:
        if undo.cancelled() or undo.exception() is not None:
            # Unknown: Redis is away, which the caller heard as LockUnavailable and said itself.
            log.debug("lock.acquire_undone", lock=self.name, result=ReleaseResult.UNKNOWN.value)
        else:
            result = release_result(undo.result())
            log.info("lock.acquire_undone", lock=self.name, result=result.value)

    async def compare_and_delete(self, record: str | bytes) -> ReleaseResult:
        try:
            outcome = await bounded(
                self.timeout,
                self.sender.outlasting(self.delete_record(record)),
            )
        except Exception as exc:
            # Returned as UNKNOWN, which each caller says in its own words.
            log.debug("lock.release_unknown", lock=self.name, error=repr(exc))
            return ReleaseResult.UNKNOWN
        return release_result(outcome)

    async def raise_fence(self, accepted: int) -> int:
        """Lift the fence counter to ``accepted``, a fence a host has already accepted, so the
        next acquisition passes that host's check again. The counter can fall behind a host
        (FLUSHALL, a new Redis, a failover to a replica that missed the INCR); then every lease
        is refused there until this runs. Never lowers the counter; returns its value.

        Raises ``LockUnavailable`` when Redis cannot be reached.
        """
        try:
            value = await self.sender.outlasting(
                self.sender.call(
                    self.sender.prepare(self.scripts.raise_fence, [self.fence_key], [int(accepted)])
                )
            )
        except Exception as exc:
            raise LockUnavailable(self.name) from exc
        return int(value)


__all__ = [
    "Lease",
    "LockError",
    "LockHeld",
    "LockLost",
    "LockUnavailable",
    "ReleaseResult",
    "TokenLock",
]
