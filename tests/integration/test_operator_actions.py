"""Operators' actions kept for ``playguard why`` in a real Redis: each scope's list keeps the
newest ``KEPT_ACTIONS`` however many are recorded, and a key that is not a list, or an entry
that is not of the written shape, reads as nothing rather than failing ``why``."""

from __future__ import annotations

from redis.asyncio import Redis

from playguard_async.coordination.keys import operator_actions_key
from playguard_async.coordination.operator_actions import (
    ENTRY_MAX,
    FLEET,
    KEPT_ACTIONS,
    operator_actions,
    record_operator_action,
)

HOSTILE = "\x1b]0;owned\x07<script>x</script>" + "A" * 1_000_000


async def test_each_scope_keeps_its_newest_actions_bounded_in_entries_and_bytes(
    redis: Redis,
) -> None:
    for index in range(KEPT_ACTIONS + 30):
        await record_operator_action(redis, "m1", "pin", reason=f"r{index}", target=HOSTILE,
                                     by=HOSTILE, at=1000.0 + index, timeout=1.0)  # fmt: skip
    await record_operator_action(redis, FLEET, "pause", reason="all", timeout=1.0)

    kept = await operator_actions(redis, "m1", 1.0)

    assert [action.reason for action in kept] == [f"r{i}" for i in range(30, KEPT_ACTIONS + 30)]
    assert await redis.llen(operator_actions_key("m1")) == KEPT_ACTIONS
    assert max(len(raw) for raw in await redis.lrange(operator_actions_key("m1"), 0, -1)) <= (
        ENTRY_MAX
    )
    (fleet,) = await operator_actions(redis, FLEET, 1.0)
    assert (fleet.action, fleet.reason, "@" in fleet.by) == ("pause", "all", True)


async def test_a_key_of_another_type_or_a_foreign_entry_reads_as_nothing(redis: Redis) -> None:
    await redis.set(operator_actions_key("m1"), "not a list")
    await redis.rpush(operator_actions_key("m2"), "not json", '{"at": 1}')

    assert await operator_actions(redis, "m1", 1.0) == []
    assert await operator_actions(redis, "m2", 1.0) == []
