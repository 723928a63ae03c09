"""One Marquee's story as the desired state steers it: what ``playguard describe`` prints and the
web view's Marquee page shows.

It lives apart from the web view (``web.fleet_picture``) so that the operator's commands
tell the same story without importing the daemon's web view.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime

from playguard_async.coordination.containers_seen import read_seen
from playguard_async.coordination.marquee_reads import MarqueeStory, WantedPlayground, read_story
from playguard_async.coordination.records import CycleRecords
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.desired_state.windows import Window, next_opening


async def steered_story(
    records: CycleRecords,
    marquee: Marquee,
    fleet_windows: Sequence[Window],
    *,
    limit: int,
    inventory: Inventory | None = None,
    now: datetime | None = None,
) -> MarqueeStory:
    """``marquee``'s story from Redis with what the desired state steers it by: its mode, and
    its maintenance windows (its own, else ``fleet_windows``) and when they next open after
    ``now`` (default: now); with ``inventory``, what it asks of each of its Playgrounds, and
    what its last cycles saw running (``coordination.containers_seen``).
    ``playguard describe`` and the web view's Marquee page both tell it."""
    windows = marquee.windows if marquee.windows is not None else list(fleet_windows)
    told = read_story(
        records,
        marquee.name,
        limit=limit,
        mode=marquee.mode,
        windows=len(windows),
        next_opening=next_opening(windows, now or datetime.now(UTC)) if windows else None,
    )
    if inventory is None:
        return await told
    story, seen = await asyncio.gather(
        told, read_seen(records.redis, marquee.name, records.timeout)
    )
    return dataclasses.replace(story, wanted=wanted_playgrounds(inventory, marquee.name), seen=seen)


def wanted_playgrounds(inventory: Inventory, marquee: str) -> tuple[WantedPlayground, ...]:
    """What the desired state asks of ``marquee``'s Playgrounds and their agent chats."""
    chats = inventory.agent_chats_on(marquee)
    wanted = []
    for playground in inventory.playgrounds_on(marquee):
        playspec = inventory.playspec_of(playground)
        wanted.append(
            WantedPlayground(
                name=playground.name,
                playspec=playspec.name,
                repo=str(playspec.repo),
                branch=playground.branch,
                state=playground.state,
                images=tuple(playspec.images),
                expires_at=playground.expires_at,
                chats=tuple(
                    (chat.name, str(chat.image), chat.state)
                    for chat in chats
                    if chat.playground == playground.name
                ),
            )
        )
    return tuple(wanted)
