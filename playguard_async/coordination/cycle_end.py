"""A cycle's ending in one round trip: release the lease, record the cycle, keep the resume set.

Three writes end every cycle that held a lease: the lock's compare-and-delete, the cycle record
(last + history) and the resume bookkeeping (the Marquee added to ``playguard:resume`` when a stop
cut its cycle short, removed otherwise). They go out in one round trip, not three, through the
client's sender (``client.RedisSender.send_all``): one batch on the command channel (shared with
the endings of concurrent cycles), or one pipeline on a Cluster.

The batch is not a transaction: the keys live in three Cluster slots (``{marquee:NAME}``,
``{NAME}`` and the resume set's own), and MULTI/EXEC may not span slots. On a Cluster redis-py
sends each node its share at once. Nothing here needs atomicity across the three: each answer is
judged on its own, and a write that fails is reported, never taken for done:

- the release is the lock's Lua compare-and-delete, as ever; an error or a timeout of its
  command or of the whole pipeline is ``ReleaseResult.UNKNOWN``, never ``RELEASED``;
- a script Redis lost (NOSCRIPT: a restart, a failover) did not run, so it is sent again whole,
  on its own, before the answers are judged;
- a record Redis did not take stays unwritten in ``CycleRecords`` and goes out with the next
  (its write is one script on the Marquee's slot: set the last record, push, trim by count and
  bytes);
- every failure comes back in ``Ending``, so the engine logs it beside the cycle's own outcome.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoScriptError

from playguard_async.coordination.client import RedisClient, sender_for
from playguard_async.coordination.keys import RESUME_KEY
from playguard_async.coordination.lock import Lease, ReleaseResult
from playguard_async.coordination.records import CycleRecords
from playguard_async.kits.aio import kept


class Resume(enum.Enum):
    """What a cycle's ending does to the resume set."""

    RECORD = "record"
    """A stop cut the cycle short: the next start of any replica runs this Marquee first."""
    CLEAR = "clear"
    """The cycle ran to an end of its own: no longer owed a resume."""


@dataclass(slots=True)
class Ending:
    """What the ending's round trip found; errors are values, for the engine to log."""

    released: ReleaseResult | None = None
    """None when the cycle held no lease."""
    record_error: BaseException | None = None
    resume_error: BaseException | None = None


class CycleEnd:
    """Writes a cycle's ending (see the module's doc) within ``timeout`` seconds."""

    def __init__(self, redis: RedisClient, records: CycleRecords | None, timeout: float) -> None:
        self.redis = redis
        self.records = records
        self.timeout = timeout
        self.sender = sender_for(redis, timeout=timeout)

    def write(
        self,
        marquee: str,
        *,
        lease: Lease | None,
        record: Mapping[str, object] | None,
        resume: Resume | None,
    ) -> asyncio.Future[Ending]:
        """Send what applies of release, ``record`` and ``resume`` in one round trip, now; the
        future holds what it found, and never fails for Redis's sake.

        The writes and the judging of their answers run to their end whatever becomes of the
        caller: cancelling a wait for the future cancels neither, so a cycle cancelled again in
        its ending still settles its lease and records each cycle once. No task is needed for
        that on the channel, where the answers are judged in a callback (a task per ending cost
        more; bench/README.md)."""
        ending: asyncio.Future[Ending] = asyncio.get_running_loop().create_future()
        batch = (
            self.records.pending(marquee, record)
            if self.records is not None and record is not None
            else []
        )
        if lease is None and not batch and resume is None:
            ending.set_result(Ending())
            return ending
        commands: list[tuple[str | int | float, ...]] = []
        resends: list[Callable[[], Awaitable[Any]] | None] = []
        if lease is not None:
            commands.append(lease.release_command())
            resends.append(lease.release)  # settles the lease; its answer then stands
        if batch and self.records is not None:
            commands.append(self.records.write_command(marquee, batch))
            resends.append(functools.partial(self.records.write_whole, marquee, batch))
        if resume is Resume.RECORD:
            commands.append(("ZADD", RESUME_KEY, time.time(), marquee))
        elif resume is Resume.CLEAR:
            commands.append(("ZREM", RESUME_KEY, marquee))
        judged = _Judged(self, ending, marquee, lease, batch, resume, resends)
        self.sender.send_all(commands, judged)
        return ending


@dataclass(slots=True)
class _Judged:
    """Turns one ending's answers into its ``Ending`` and settles the future with it."""

    end: CycleEnd
    ending: asyncio.Future[Ending]
    marquee: str
    lease: Lease | None
    batch: list[str]
    resume: Resume | None
    resends: list[Callable[[], Awaitable[Any]] | None]
    """Per command but the resume's, how to send its script whole after a NOSCRIPT answer."""

    def __call__(self, answers: list[Any]) -> None:
        if any(isinstance(answer, NoScriptError) for answer in answers):
            # Redis lost a script (a restart, a failover): each is sent again whole, which
            # takes round trips of their own.
            kept(self._after_resending(answers))
            return
        self._settle(answers)

    async def _after_resending(self, answers: list[Any]) -> None:
        for index, resend in enumerate(self.resends):
            if resend is not None and isinstance(answers[index], NoScriptError):
                try:
                    answers[index] = await resend()
                except Exception as exc:
                    answers[index] = exc
        self._settle(answers)

    def _settle(self, answers: list[Any]) -> None:
        if self.ending.done():  # cancelled by a caller who was told not to: nobody listens
            return
        try:
            ending = self._judge(iter(answers))
        except Exception as exc:  # a bug of ours: the waiter hears it, nothing swallows it
            self.ending.set_exception(exc)
        else:
            self.ending.set_result(ending)

    def _judge(self, answers: Iterator[Any]) -> Ending:
        ending = Ending()
        if self.lease is not None:
            ending.released = self.lease.release_answered(next(answers))
        records = self.end.records
        if self.batch and records is not None:
            ending.record_error = records.answered(self.marquee, self.batch, next(answers))
        if self.resume is not None and isinstance(error := next(answers), BaseException):
            ending.resume_error = error
        return ending
