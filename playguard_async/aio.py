"""Asyncio habits the lock and the engine share: bounded awaits, clean-ups that survive a cancel."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

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
