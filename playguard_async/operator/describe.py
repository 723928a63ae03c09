"""One Marquee's story for the person on call: ``playguard describe`` and ``playguard history``.

``status`` is the fleet on one screen; this is one Marquee in depth: its lock now (holder, the
fence on Redis, the fence its host was last seen to hold, time left), its last cycle phase by
phase (time, actions, what it found, the error in words), what is still wrong against what that
cycle fixed, and its recent cycles. Everything comes from Redis, where every replica records;
nothing connects to the host (``check`` does). Records are outside input: a field of the wrong
type reads as missing, never as an error.
"""

from __future__ import annotations

from datetime import datetime

from playguard_async.coordination.marquee_reads import MarqueeStory
from playguard_async.coordination.records import CycleRecords
from playguard_async.operator.fleet import OperateError, open_fleet
from playguard_async.service.connections import inventory_source
from playguard_async.service.story import steered_story
from playguard_async.settings import Settings


async def marquee_story(
    settings: Settings, name: str, *, limit: int, now: datetime | None = None
) -> MarqueeStory:
    """``name``'s lock, fences, last cycle and up to ``limit`` recent cycles, newest first; its
    mode, pause and when its maintenance windows next open after ``now`` (default: now)."""
    async with open_fleet(settings) as fleet:
        # The error names where the desired state came from: the YAML file's path, or the
        # database's URL (which never carries its password).
        source = inventory_source(settings)
        inventory = await source.load()
        try:
            marquee = inventory.marquee(name)
        except KeyError:
            raise OperateError(f"no Marquee named {name!r} in {source.describe()}") from None
        records = CycleRecords(
            fleet.redis,
            history_length=settings.history_length,
            timeout=settings.redis_socket_timeout,
        )
        return await steered_story(records, marquee, settings.windows, limit=limit, now=now)
