"""A cycle's ending in one round trip: release the lease, record the cycle, keep the resume set.

Three writes end every cycle that held a lease: the lock's compare-and-delete, the cycle record
(last + history) and the resume bookkeeping (the Marquee added to ``playguard:resume`` when a stop
cut its cycle short, removed otherwise). They go out in one round trip, not three: one batch on
the client's command channel (``redis_channel``, shared with the endings of concurrent cycles), or
one pipeline on a Cluster.

The batch is not a transaction: the keys live in three Cluster slots (``{marquee:NAME}``,
``{NAME}`` and the resume set's own), and MULTI/EXEC may not span slots. On a Cluster redis-py
sends each node its share at once. Nothing here needs atomicity across the three: each answer is
judged on its own, and a write that fails is reported, never taken for done:

- the release is the lock's Lua compare-and-delete, as ever; an error or a timeout of its
  command or of the whole pipeline is ``ReleaseResult.UNKNOWN``, never ``RELEASED`` (``Lease``
  settles it, and asks again by itself only when Redis lost the script);
- a record Redis did not take stays unwritten in ``CycleRecords`` and goes out with the next
  (its write is one script on the Marquee's slot: set the last record, push, trim by count and
  bytes);
- every failure comes back in ``Ending``, so the engine logs it beside the cycle's own outcome.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from playguard_async.aio import bounded
from playguard_async.keys import RESUME_KEY
from playguard_async.lock import Lease, ReleaseResult
from playguard_async.observe import CycleRecords
from playguard_async.redis_channel import ChannelledRedis
from playguard_async.redis_client import RedisClient


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

    async def write(
        self,
        marquee: str,
        *,
        lease: Lease | None,
        record: Mapping[str, Any] | None,
        resume: Resume | None,
    ) -> Ending:
        """Send what applies of release, ``record`` and ``resume`` in one round trip. Never raises
        for Redis's sake: a failure is in the ``Ending``."""
        batch = (
            self.records.pending(marquee, record)
            if self.records is not None and record is not None
            else []
        )
        if lease is None and not batch and resume is None:
            return Ending()
        commands: list[tuple[str | int | float, ...]] = []
        if lease is not None:
            commands.append(lease.release_command())
        if batch and self.records is not None:
            commands.append(self.records.write_command(marquee, batch))
        if resume is Resume.RECORD:
            commands.append(("ZADD", RESUME_KEY, time.time(), marquee))
        elif resume is Resume.CLEAR:
            commands.append(("ZREM", RESUME_KEY, marquee))
        try:
            answers = await self._send(commands)
        except Exception as exc:  # the whole round trip failed: every write is unknown
            answers = [exc] * len(commands)
        ending = Ending()
        if lease is not None:
            ending.released = await lease.settle_release(answers.pop(0))
        if batch and self.records is not None:
            ending.record_error = await self.records.settle(marquee, batch, answers.pop(0))
        if resume is not None and isinstance(answers[0], BaseException):
            ending.resume_error = answers[0]
        return ending

    async def _send(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Every command's answer or error, in order, from one round trip within ``timeout``: on
        the client's channel, where concurrent cycles' endings share the write, else in a
        pipeline."""
        if isinstance(self.redis, ChannelledRedis):
            channel = self.redis.channel
            sent = [channel.send(*command, timeout=self.timeout) for command in commands]
            return [await _answer(answer) for answer in sent]
        async with self.redis.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return list(await bounded(self.timeout, pipe.execute(raise_on_error=False)))


async def _answer(sent: asyncio.Future[Any]) -> Any:
    """``sent``'s answer, or its error as a value (a gather of three answers cost more than the
    three awaits)."""
    try:
        return await sent
    except Exception as exc:
        return exc
