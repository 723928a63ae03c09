"""One Marquee's story as the desired state steers it: what ``playguard describe`` prints and the
web view's Marquee page shows.

It lives apart from the web view (``web.fleet_picture``) so that the operator's commands
tell the same story without importing the daemon's web view.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from playguard_async.coordination.marquee_reads import MarqueeStory, read_story
from playguard_async.coordination.records import CycleRecords
from playguard_async.desired_state.model import Marquee
from playguard_async.desired_state.windows import Window, next_opening


async def steered_story(
    records: CycleRecords,
    marquee: Marquee,
    fleet_windows: Sequence[Window],
    *,
    limit: int,
    now: datetime | None = None,
) -> MarqueeStory:
    """``marquee``'s story from Redis with what the desired state steers it by: its mode, and
    its maintenance windows (its own, else ``fleet_windows``) and when they next open after
    ``now`` (default: now). ``playguard describe`` and the web view's Marquee page both tell it."""
    windows = marquee.windows if marquee.windows is not None else list(fleet_windows)
    return await read_story(
        records,
        marquee.name,
        limit=limit,
        mode=marquee.mode,
        windows=len(windows),
        next_opening=next_opening(windows, now or datetime.now(UTC)) if windows else None,
    )
