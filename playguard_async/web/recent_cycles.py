"""Each fleet-page row's strip of recent cycles, read from the cycle history Redis keeps only for
the rows of the pages rendered, and again only when a row's last cycle is a new one.

The fleet picture holds each Marquee's last cycle, not its history (a whole read of 10,000
histories would cost far more than the page). A page shows at most ``PAGE_SIZE`` rows, so its
strips cost at most that many history reads the first time, and then one per row whose last
cycle changed: a strip is kept, drawn, with the cycle it ends on. Concurrent renders of the same
rows share one read per Marquee, so a hundred open pages cost Redis what one does.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

import structlog
from markupsafe import Markup
from redis.exceptions import RedisError, ResponseError

from playguard_async.coordination.marquee_reads import LastCycle
from playguard_async.coordination.records import CycleRecords
from playguard_async.engine.results import one_line
from playguard_async.web.pictures import CYCLES_DRAWN, small_strip

log = structlog.get_logger("playguard.web")

STRIPS_KEPT = 2_000
"""Marquees whose strip is kept at most (ten pages of rows); past it the oldest kept go."""


class RecentCycles:
    """Drawn strips by Marquee, each with the last cycle it ends on."""

    def __init__(self, records: CycleRecords) -> None:
        self.records = records
        self._kept: dict[str, tuple[str, Markup]] = {}
        self._reading: dict[tuple[str, str], asyncio.Task[Markup | None]] = {}

    async def strips(self, rows: Sequence[tuple[str, str]], *, read: bool) -> dict[str, Markup]:
        """Marquee -> its strip, for ``rows`` of (Marquee, the id of its last cycle as the
        picture has it); a Marquee whose history could not be read has none this time. Without
        ``read`` (Redis is known to be away: a page must not wait out its timeout), the strips
        kept are given as they are, whatever cycle they end on."""
        found: dict[str, Markup] = {}
        wanted: list[tuple[str, asyncio.Task[Markup | None]]] = []
        for name, cycle in rows:
            kept = self._kept.get(name)
            if kept is not None and (kept[0] == cycle or not read):
                found[name] = kept[1]
                continue
            if not read:
                continue
            key = (name, cycle)
            task = self._reading.get(key)
            if task is None:
                task = self._reading[key] = asyncio.ensure_future(self._read(name, cycle))
                task.add_done_callback(functools.partial(self._read_done, key))
            wanted.append((name, task))
        for name, task in wanted:
            drawn = await asyncio.shield(task)
            if drawn is not None:
                found[name] = drawn
        return found

    def _read_done(self, key: tuple[str, str], done: asyncio.Task[Markup | None]) -> None:
        self._reading.pop(key, None)

    async def _read(self, name: str, cycle: str) -> Markup | None:
        try:
            history = await self.records.history(name, limit=CYCLES_DRAWN)
        except ResponseError:  # another type than a list: no history, until its next cycle
            history = []
        except (RedisError, TimeoutError, OSError) as exc:
            log.warning("web.history_unread", marquee=name, error=one_line(exc))
            return None
        drawn = small_strip([LastCycle.from_record(entry) for entry in history])
        self._kept.pop(name, None)
        if len(self._kept) >= STRIPS_KEPT:
            del self._kept[next(iter(self._kept))]  # the oldest
        self._kept[name] = (cycle, drawn)
        return drawn
