"""``bounded`` never loses a cancel, whatever state the awaited work is in when the cancel
arrives (``asyncio.wait_for`` on 3.11 returns the result of work that completed in the same turn
as the cancel, and the task asked to end runs on: the idle-connection flood hung on it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from playguard_async.kits.aio import bounded

Bound = Callable[[float, Awaitable[int]], Awaitable[int]]


async def cancelled_as_work_completes(bound: Bound, when: str) -> str:
    """What a task that loops on ``bound`` does when cancelled ``when`` its work completes."""
    loop = asyncio.get_running_loop()
    work: asyncio.Future[int] = loop.create_future()
    turns = 0

    async def looping() -> None:
        nonlocal work, turns
        while True:
            await bound(10.0, work)
            turns += 1
            work = loop.create_future()

    task = asyncio.create_task(looping())
    await asyncio.sleep(0)  # the task now waits on its first piece of work
    if when == "in the same turn":
        work.set_result(1)
        task.cancel()
    else:
        work.set_result(1)
        await asyncio.sleep(0)
        task.cancel()
    for _ in range(10):
        await asyncio.sleep(0)
    if task.done():
        return "ended" if task.cancelled() else f"raised {task.exception()!r}"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return "ran on"


@pytest.mark.parametrize("when", ["in the same turn", "a turn later"])
async def test_a_cancel_as_the_awaited_work_completes_ends_the_task(when: str) -> None:
    assert await cancelled_as_work_completes(bounded, when) == "ended"


async def test_wait_for_here_loses_such_a_cancel_which_is_why_it_is_banned() -> None:
    # The reason ruff bans asyncio.wait_for: if this starts failing, the Python in use no
    # longer has the defect and the ban can go.
    async def wait_for(timeout: float, work: Awaitable[int]) -> int:
        return await asyncio.wait_for(work, timeout)  # noqa: TID251

    assert await cancelled_as_work_completes(wait_for, "in the same turn") == "ran on"
