"""Asyncio habits the modules share: bounded awaits, clean-ups that survive a cancel, named
background tasks that end with their owner."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Coroutine
from typing import Any, TypeVar

import structlog

log = structlog.get_logger("playguard.aio")

_T = TypeVar("_T")

# Clean-ups that outlived a cancelled caller are kept here until they finish, so they are not
# garbage-collected half way.
_DETACHED: set[asyncio.Task[Any]] = set()


async def bounded(timeout: float, call: Awaitable[_T]) -> _T:
    """Await ``call`` for at most ``timeout`` seconds (``TimeoutError`` after that)."""
    async with asyncio.timeout(timeout):
        return await call


async def detached(clean_up: Awaitable[_T]) -> _T:
    """Run ``clean_up`` in its own task and wait for it.

    Cancelling the waiter does not cancel the clean-up: it runs to its end (each clean-up is bounded
    by a timeout of its own) while the cancellation propagates to the caller at once.
    """
    task = asyncio.ensure_future(clean_up)
    _DETACHED.add(task)
    task.add_done_callback(_DETACHED.discard)
    return await asyncio.shield(task)


@contextlib.asynccontextmanager
async def background(name: str, work: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run ``work`` as a task named ``name`` for as long as the block lasts, then cancel it.

    A task that ends on its own while the block still runs is logged with how it ended, so a
    helper that dies (a heartbeat, a server) is seen rather than silently missing.
    """
    task = asyncio.create_task(work, name=name)
    task.add_done_callback(_log_ending)
    try:
        yield
    finally:
        if not task.done():
            task.remove_done_callback(_log_ending)
            task.cancel()
            await asyncio.wait([task])
            if not task.cancelled():  # it swallowed the cancel, or failed while handling it
                _log_ending(task)


def _log_ending(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        log.warning("task.cancelled", task=task.get_name())
    elif (error := task.exception()) is not None:
        log.error("task.failed", task=task.get_name(), error=repr(error), exc_info=error)
    else:
        log.warning("task.ended", task=task.get_name())


async def wait_or_stop(stopping: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stopping`` is set meanwhile.

    asyncio.timeout, not wait_for: on Python 3.11, wait_for swallows a cancel that arrives just as
    the event is set, and the waiter would then outlive the daemon's drain.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stopping.wait()
