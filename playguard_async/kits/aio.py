"""Asyncio habits the modules share: bounded awaits, clean-ups that survive a cancel, named
background tasks that end with their owner."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import structlog

log = structlog.get_logger("playguard.aio")

_T = TypeVar("_T")

# Clean-ups that outlived a cancelled caller are kept here until they finish, so they are not
# garbage-collected half way.
_DETACHED: set[asyncio.Task[Any]] = set()


async def bounded(timeout: float | None, call: Awaitable[_T]) -> _T:
    """Await ``call`` for at most ``timeout`` seconds (``TimeoutError`` after that; None: no bound).

    Not ``asyncio.wait_for``: on Python 3.11 that returns the result when a cancel arrives as
    ``call`` completes, losing the cancel, and a task asked to end runs on (ruff bans it here).
    """
    async with asyncio.timeout(timeout):
        return await call


async def detached(clean_up: Awaitable[_T]) -> _T:
    """Run ``clean_up`` in its own task and wait for it.

    Cancelling the waiter does not cancel the clean-up: it runs to its end (each clean-up is bounded
    by a timeout of its own) while the cancellation propagates to the caller at once.
    """
    return await asyncio.shield(kept(clean_up))


def kept(work: Awaitable[_T]) -> asyncio.Future[_T]:
    """Start ``work`` as a task that is referenced until it ends, whoever waits for it or not
    (the loop holds tasks only weakly)."""
    task = asyncio.ensure_future(work)
    _DETACHED.add(task)
    task.add_done_callback(_DETACHED.discard)
    return task


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


class StopSignal:
    """Set once, when the daemon stops; meanwhile any number of tasks sleep until it is set or
    their time is up, whichever comes first.

    Not an ``asyncio.Event`` waited on under a timeout: a timed-out ``Event.wait`` takes its waiter
    out of the event's deque by a linear search, so a tick's share of start offsets (100,000
    cycles each sleeping until its start) costs n²/4 comparisons and held the loop 17 s
    (bench/README.md, "Fleet simulation"). Here a sleep is one timer in the loop's heap and one
    future in a set, both dropped in constant time.
    """

    def __init__(self) -> None:
        self._set = False
        self._sleepers: set[asyncio.Future[None]] = set()

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        """Wake every sleeper now; later sleeps return at once."""
        self._set = True
        for sleeper in self._sleepers:
            if not sleeper.done():
                sleeper.set_result(None)
        self._sleepers.clear()

    async def wait(self) -> None:
        """Until the signal is set."""
        await self.sleep(math.inf)

    async def sleep(self, seconds: float, *, until: asyncio.Future[None] | None = None) -> None:
        """Sleep ``seconds``, or less if the signal is set meanwhile, or ``until`` is done: a
        future of the caller's, its way to end this one sleep early."""
        if self._set:
            return
        loop = asyncio.get_running_loop()
        sleeper = until if until is not None else loop.create_future()
        timer = loop.call_later(seconds, _wake, sleeper) if seconds < math.inf else None
        self._sleepers.add(sleeper)
        try:
            await sleeper
        finally:
            if timer is not None:
                timer.cancel()
            self._sleepers.discard(sleeper)


def _wake(sleeper: asyncio.Future[None]) -> None:
    if not sleeper.done():
        sleeper.set_result(None)


async def in_thread(work: Callable[[], _T], timeout: float, *, name: str) -> _T:
    """Run ``work`` in a daemon thread of its own; its result, or ``TimeoutError`` after
    ``timeout`` seconds.

    Not ``asyncio.to_thread``: a thread of the default executor that never returns (a hung disk)
    would hold up the loop's shutdown, and so a SIGTERM, for good. A daemon thread past its
    timeout is abandoned; it cannot keep the process alive.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            outcome = functools.partial(future.set_result, work())
        except BaseException as exc:  # handed to the waiter, whatever it is
            outcome = functools.partial(future.set_exception, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed while we worked
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    async with asyncio.timeout(timeout):
        return await future
