"""The event loop's own health: how late it wakes (the lag /metrics and /readyz show) and, when it
was held past a bound, one log line saying for how long and what held it.

A loop that never waits (a reader that returns at once forever, a CPU-bound call made on it)
starves everything on it at once: ticks, lease renewals, and the endpoints that would tell of it.
Nothing on the loop can notice its own loop held while it is held, so two parts watch it:

- the beat, a task on the loop that sleeps ``interval`` again and again and notes how much later
  than asked each wake-up came (its drift); the worst drift of the last ``LAG_WINDOW`` seconds is
  the loop's lag;
- the watchdog, a thread of its own, that looks every ``interval`` whether the beat is overdue
  past the bound and, when it is, samples the loop thread's stack (``sys._current_frames``): what
  held it, while it held it.

Both read one clock, ``time.monotonic``. A process stopped as a whole (SIGSTOP, a paused VM) wakes
late too and reads as held, its stack the loop's own wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import FrameType

import structlog

from playguard_async.kits.aio import background

log = structlog.get_logger("playguard.loop")

BEAT_INTERVAL = 0.25
"""Seconds the beat sleeps, and between two looks of the watchdog: a hold is noticed within a
quarter second past the bound, for two wake-ups a second of either."""

LAG_WINDOW = 10.0
"""Seconds a drift counts in the lag: a scrape at least this often sees every hold in the gauge
(the counter of holds sees every one, whatever the scrape interval), and /readyz answers ready
again this long after the loop is well."""

FRAMES_SHOWN = 6
"""Innermost frames a held line names: the call that held the loop and what called it."""

FRAME_TEXT_LIMIT = 160
"""Characters of one frame's text at most."""

STILL_HELD_BOUNDS = 10.0
"""A hold still going after this many bounds is told once while it lasts, in case it never ends."""

STILL_HELD_CAP = 30.0
"""Seconds after which a hold is told while it lasts, whatever the bound: before systemd's watchdog
(``WatchdogSec=60s``) restarts a process whose loop is held."""


def still_held_after(bound: float) -> float:
    """Seconds a hold lasts before it is told while it lasts (``loop.still_held``)."""
    return min(STILL_HELD_BOUNDS * bound, STILL_HELD_CAP)


@dataclass(frozen=True)
class Beat:
    """One wake-up of the beat: when it was due and when it came."""

    due: float
    woke: float

    @property
    def drift(self) -> float:
        """Seconds later than asked (a timer may fire a millisecond early: that is none)."""
        return max(0.0, self.woke - self.due)


class LagWindow:
    """The drifts of the beats of the last ``window`` seconds; the worst of them is the lag.
    At most ``window / interval`` drifts are kept. Used on the loop's thread only."""

    def __init__(self, window: float = LAG_WINDOW) -> None:
        self.window = window
        self._drifts: deque[tuple[float, float]] = deque()  # (woke, drift), oldest first

    def add(self, beat: Beat) -> None:
        self._drifts.append((beat.woke, beat.drift))
        self._forget(beat.woke)

    def worst(self, now: float, *, overdue: float = 0.0) -> float:
        """The worst drift of the window ending ``now``, or ``overdue`` if worse: a beat not
        back yet that far past its time (the loop held until a moment ago)."""
        self._forget(now)
        return max(0.0, overdue, *(drift for _, drift in self._drifts))

    def _forget(self, now: float) -> None:
        while self._drifts and self._drifts[0][0] < now - self.window:
            self._drifts.popleft()


@dataclass(frozen=True)
class Held:
    """A hold to tell of: over (``ended``: ``seconds`` it held the beat back) or still going
    (``seconds`` so far); ``where`` the loop thread's innermost frames while it held, empty when
    it came and went between two looks of the watchdog (or held the GIL throughout)."""

    seconds: float
    where: tuple[str, ...]
    ended: bool


@dataclass
class _Episode:
    due: float  # the beat it holds back was due then
    where: tuple[str, ...]
    told_still: bool = False


class HoldEpisodes:
    """The watchdog's judgement, look by look: a beat overdue more than ``bound`` starts an
    episode (its stack sampled once, then); the beat coming back ends it. Each episode is told
    once when it ends and, if it lasts ``still_after`` seconds, once more while it lasts: never a
    line per look. Pure (the clock and the stack are arguments), so the tests drive it.
    """

    def __init__(self, bound: float, still_after: float) -> None:
        self.bound = bound
        self.still_after = still_after
        self._episode: _Episode | None = None
        self._seen_due = -math.inf  # the due of the last beat looked at

    def look(
        self,
        now: float,
        due: float,
        last: Beat | None,
        where: Callable[[], tuple[str, ...]],
    ) -> Held | None:
        """What to tell at ``now``, when the beat in flight was due at ``due`` and ``last`` is
        the latest beat back; ``where`` samples the loop thread's stack, called at most once."""
        told = None
        if last is not None and last.due > self._seen_due:
            self._seen_due = last.due
            episode = self._episode
            if episode is not None and episode.due <= last.due:
                self._episode = None
                told = Held(last.drift, episode.where, ended=True)
            elif last.drift > self.bound:
                told = Held(last.drift, (), ended=True)
        overdue = now - due
        if due <= self._seen_due:  # that beat is back: the loop wrote ``last`` but not the next
            return told
        if self._episode is None:
            if overdue > self.bound:
                self._episode = _Episode(due, where())
        elif told is None and not self._episode.told_still and overdue >= self.still_after:
            self._episode.told_still = True
            told = Held(overdue, self._episode.where, ended=False)
        return told


def where_held(frame: FrameType | None, *, limit: int = FRAMES_SHOWN) -> tuple[str, ...]:
    """The innermost ``limit`` frames from ``frame`` out, as ``function (file:line)``, the file
    relative to the ``sys.path`` entry it was imported from (site-packages, the project's root)."""
    shown: list[str] = []
    while frame is not None and len(shown) < limit:
        code = frame.f_code
        text = f"{code.co_qualname} ({_relative(code.co_filename)}:{frame.f_lineno})"
        shown.append(text[:FRAME_TEXT_LIMIT])
        frame = frame.f_back
    return tuple(shown)


def _relative(filename: str) -> str:
    roots = [root.rstrip(os.sep) + os.sep for root in sys.path if root]
    under = [root for root in roots if filename.startswith(root)]
    return filename[len(max(under, key=len)) :] if under else filename


class LoopWatch:
    """The beat and the watchdog of the loop ``running`` runs on; its lag for /metrics and
    /readyz. A hold past ``bound`` is logged (``loop.held``) and ``on_held`` is called, from the
    watchdog's thread, once per hold, when it ends.
    """

    def __init__(
        self,
        *,
        bound: float,
        interval: float = BEAT_INTERVAL,
        window: float = LAG_WINDOW,
        on_held: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bound = bound
        self.interval = interval
        self._on_held = on_held
        self._clock = clock
        self._window = LagWindow(window)
        self._episodes = HoldEpisodes(bound, still_held_after(bound))
        # Written by the beat on the loop's thread, read by the watchdog: one reference each,
        # replaced whole, so a read sees one beat or the next, never half of one.
        self._due = clock() + interval
        self._last: Beat | None = None
        self._loop_thread: int | None = None

    def lag(self) -> float:
        """Seconds: the worst drift of the last window, or the beat's now if it is overdue."""
        now = self._clock()
        return self._window.worst(now, overdue=now - self._due)

    def lagging(self) -> str | None:
        """Why the replica is not ready while its loop lags past the bound; None if it does not."""
        lag = self.lag()
        if lag <= self.bound:
            return None
        return f"event loop lagging {lag:.1f} s (bound {self.bound:g} s)"

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The beat on the running loop and the watchdog on its thread, for as long as the block
        lasts; the watchdog is stopped first, so the beat's end is not taken for a hold."""
        self._loop_thread = threading.get_ident()
        stop = threading.Event()
        watchdog = threading.Thread(
            target=self._watch, args=(stop,), name="loop-watchdog", daemon=True
        )
        async with background("loop-beat", self._beat()):
            watchdog.start()
            try:
                yield
            finally:
                stop.set()
                watchdog.join()  # it waits on ``stop``: back within one look

    async def _beat(self) -> None:
        while True:
            self._due = self._clock() + self.interval
            await asyncio.sleep(self.interval)
            beat = Beat(self._due, self._clock())
            self._last = beat
            self._window.add(beat)

    def _watch(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            last = self._last
            held = self._episodes.look(self._clock(), self._due, last, self._where)
            if held is not None:
                self._tell(held)

    def _where(self) -> tuple[str, ...]:
        if self._loop_thread is None:
            return ()
        return where_held(sys._current_frames().get(self._loop_thread))

    def _tell(self, held: Held) -> None:
        fields = {"held_seconds": round(held.seconds, 3), "bound": self.bound}
        if held.ended:
            log.warning("loop.held", **fields, where=list(held.where))
            self._on_held()
        else:
            log.error("loop.still_held", **fields, where=list(held.where))
