"""Wake-ups from PostgreSQL: one LISTEN connection on the channel the triggers NOTIFY, its
names gathered and handed to the engine, debounced; it reconnects on its own and, once back,
has the engine read what changed while nobody listened."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import asyncpg
import structlog

from playguard_async.desired_state.postgres.connection import (
    DatabaseError,
    PasswordSource,
    PgAddress,
    connect,
    redacted,
)
from playguard_async.kits.aio import bounded

log = structlog.get_logger("playguard.desired_state")


LISTENER_PROBE_INTERVAL = 30.0
"""Seconds between the probes that ask the LISTEN connection whether it still answers
(``desired_state_probe_interval``)."""

NOTIFY_CHANNEL = "playguard_desired_state"
"""The channel the migrations' triggers send a changed Marquee's name on."""

WAKE_QUIET = 0.05
"""Seconds without a further notification that end a gathering: PostgreSQL delivers a
transaction's notifications together at its commit, so an edit of several rows has arrived
whole well within this, and a lone change waits no longer than this for company."""

WAKE_GATHER_MAX = 1.0
"""Seconds a gathering lasts at most after its first notification: a steady stream of edits
(never ``WAKE_QUIET`` apart) still wakes its Marquees at least this often, each once."""

RECONNECT_DELAY = 1.0
"""Seconds between attempts to get the listening connection back."""

Wake = Callable[[set[str]], Awaitable[object]]
Resync = Callable[[], Awaitable[object]]


class NotificationListener:
    """One dedicated connection (never a pooled one: LISTEN belongs to its session) that LISTENs
    on ``NOTIFY_CHANNEL`` and hands the changed Marquees' names to ``wake``, debounced.

    Notifications sent while it is disconnected are lost, so after every reconnect it LISTENs
    again and calls ``resync`` (a full tick). PgBouncer in transaction mode cannot carry a LISTEN
    (the session it was sent on is handed to others): point ``desired_state`` at PostgreSQL or a
    session-mode pool.
    """

    def __init__(
        self,
        address: PgAddress,
        password: PasswordSource,
        *,
        timeout: float,
        quiet: float = WAKE_QUIET,
        gather_max: float = WAKE_GATHER_MAX,
        probe_interval: float = LISTENER_PROBE_INTERVAL,
    ) -> None:
        self.address = address
        self._password = password
        self._timeout = timeout
        self._probe_interval = probe_interval
        self._quiet = quiet
        self._gather_max = gather_max
        self._pending: set[str] = set()
        self._arrived = asyncio.Event()
        self.connected: bool | None = None
        """None before the first attempt; then whether the listening connection is up."""

    async def _gather(self) -> None:
        """Wait until ``_quiet`` seconds pass without a notification, or ``_gather_max`` since
        the first, whichever comes first; ``_arrived`` is clear when this returns."""
        deadline = asyncio.get_running_loop().time() + self._gather_max
        while self._arrived.is_set():
            self._arrived.clear()
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await bounded(min(self._quiet, left), self._arrived.wait())

    def _notified(self, connection: object, pid: int, channel: str, payload: str) -> None:
        self._pending.add(payload)
        self._arrived.set()

    async def run(self, wake: Wake, resync: Resync) -> None:
        """Listen until cancelled: reconnects on its own, wakes Marquees as their rows change."""
        waking = asyncio.create_task(self._wake_loop(wake), name="desired-state-wake")
        try:
            first = True
            while True:
                lost = await self._listen_once(resync if not first else None)
                first = first and not lost
                await asyncio.sleep(RECONNECT_DELAY)
        finally:
            waking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waking

    async def _listen_once(self, resync: Resync | None) -> bool:
        """One connection's life; True once it had been listening (so the next is a reconnect)."""
        try:
            connection = await connect(self.address, self._password, timeout=self._timeout)
        except DatabaseError as exc:
            if self.connected is not False:  # once per change
                log.warning(
                    "desired_state.listener_down",
                    source=self.address.describe(),
                    error=str(exc).removeprefix(f"{self.address.describe()}: "),
                )
            self.connected = False
            return False
        closed = asyncio.Event()
        connection.add_termination_listener(lambda _: closed.set())
        try:
            await connection.add_listener(NOTIFY_CHANNEL, self._notified)
            self.connected = True
            log.info("desired_state.listening", source=self.address.describe())
            if resync is not None:
                await resync()  # what changed while nobody listened
            await self._until_lost(connection, closed)
            log.warning("desired_state.listener_lost", source=self.address.describe())
            return True
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("desired_state.listener_lost", source=self.address.describe(),
                        error=redacted(f"{type(exc).__name__}: {exc}", None))  # fmt: skip
            return True
        finally:
            self.connected = False
            connection.terminate()

    async def _until_lost(self, connection: asyncpg.Connection, closed: asyncio.Event) -> None:
        """Return when the connection closes; raise when it stops answering a probe.

        A LISTENing connection only ever receives: after a black hole or a firewall that forgot
        it, nothing would tell it the database is gone until TCP's keepalive (two hours by
        default). So every ``probe_interval`` seconds it asks ``SELECT 1``, bounded by
        ``timeout``: a dead link is noticed within ``probe_interval + timeout``.
        """
        while True:
            with contextlib.suppress(TimeoutError):
                await bounded(self._probe_interval, closed.wait())
                return
            await connection.fetchval("SELECT 1", timeout=self._timeout)

    async def _wake_loop(self, wake: Wake) -> None:
        """Hand the gathered names to ``wake``, one gathering at a time: notifications that
        arrive while ``wake`` runs (a read, cycles starting) are the next gathering, so a burst
        costs one wake-up per gathering, never one per notification."""
        while True:
            await self._arrived.wait()
            await self._gather()
            names, self._pending = self._pending, set()
            if names:
                log.debug("desired_state.notified", marquees=sorted(names))
                await wake(names)
