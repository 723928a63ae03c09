"""``playguard status``: every Marquee of the inventory, its lock now and its last cycle."""

from __future__ import annotations

import asyncio

from playguard_async.coordination.marquee_reads import MarqueeStatus, read_status
from playguard_async.coordination.records import CycleRecords
from playguard_async.operator.fleet import open_fleet
from playguard_async.settings import Settings


async def fleet_status(settings: Settings) -> list[MarqueeStatus]:
    """Every Marquee of the inventory, in inventory order: its lock now and its last cycle."""
    async with open_fleet(settings) as fleet:
        inventory = await fleet.inventory()
        records = CycleRecords(
            fleet.redis,
            history_length=settings.history_length,
            timeout=settings.redis_socket_timeout,
        )

        return list(
            await asyncio.gather(
                *(
                    read_status(
                        records, marquee.name, launchable=marquee.launchable, mode=marquee.mode
                    )
                    for marquee in inventory.marquees
                )
            )
        )
