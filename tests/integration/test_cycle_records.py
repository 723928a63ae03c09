"""Cycle records in the lab's Redis: the last one per Marquee and a capped history."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from playguard_async.observe import CycleRecords

pytestmark = pytest.mark.integration


async def test_history_is_capped_and_newest_first(redis: Redis) -> None:
    records = CycleRecords(redis, history_length=3, timeout=1.0)
    for number in range(7):
        await records.record("edge-1", {"cycle": number, "outcome": "ok"})
    assert [r["cycle"] for r in await records.history("edge-1")] == [6, 5, 4]
    assert await records.last("edge-1") == {"cycle": 6, "outcome": "ok"}
    assert await records.last("edge-2") is None
    assert await records.history("edge-2") == []
