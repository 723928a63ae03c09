"""The desired state from PostgreSQL: each ``load`` reads one consistent snapshot (one REPEATABLE
READ READ ONLY transaction) and validates every row with the inventory's own models.

The database's CHECK constraints mirror the models, but another tool may have written around
them (constraints dropped, a restore from elsewhere): every row is validated again. A refused row
takes out only the Marquees whose desired state it is part of (a playground's Marquee, every
Marquee using a playspec or registry), since a cycle that saw a Marquee without one of its
playgrounds would remove that playground from the host; the rest of the fleet reconciles. Each
refusal names table, key, column and value, and is logged when the set of refusals changes.

The database unreachable: ``load`` returns the last good snapshot, logs once when reachability
changes, and ``reachable`` says so for /readyz and the metrics; the next tick tries again. With
no snapshot yet (out of reach since start) it raises ``DesiredStateUnavailable``, which the engine
waits out (no cycles, /readyz not ready) rather than treating as a configuration error.

This module is the source's life (its connection, reachability, the wake-ups it serves by
narrow reads, its share, the checkpoints it takes); the work is elsewhere in the package:
``snapshot`` reads, ``shares`` lists a share's others, ``validation`` makes the inventory,
``notify`` listens, ``relations`` says what is read.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence

import asyncpg
import structlog

from playguard_async.cycle_record import CycleRecord, DesiredVersion
from playguard_async.desired_state.model import (
    DesiredStateUnavailable,
    Inventory,
    InventoryError,
)
from playguard_async.desired_state.postgres.audit_checkpoint import CheckpointWriter
from playguard_async.desired_state.postgres.connection import (
    DEFAULT_SCHEMA,
    DatabaseError,
    PasswordSource,
    PgAddress,
    connect,
    redacted,
)
from playguard_async.desired_state.postgres.notify import (
    LISTENER_PROBE_INTERVAL,
    NotificationListener,
    Resync,
    Wake,
)
from playguard_async.desired_state.postgres.observed_state import ObservedStateWriter
from playguard_async.desired_state.postgres.relations import Rows
from playguard_async.desired_state.postgres.snapshot import (
    NarrowReadRefused,
    Snapshot,
    SnapshotTooLarge,
    read_marquees,
    read_snapshot,
)
from playguard_async.desired_state.postgres.validation import RowMemo, Validated, validate_snapshot
from playguard_async.desired_state.source import Ability
from playguard_async.desired_state.yaml_source import INVENTORY_MAX_BYTES
from playguard_async.kits.aio import bounded, in_thread

log = structlog.get_logger("playguard.desired_state")


SNAPSHOT_TIMEOUT = 10.0
"""Default seconds connecting and reading one snapshot may take."""

NARROW_READ_MAX = 100
"""Most Marquees one narrow read serves: past it (a playspec many use changed) the whole
snapshot costs about as much, is validated off the loop, and refreshes everyone's state."""


class PostgresDesiredState:
    """A ``DesiredState`` that reads PostgreSQL; keeps one connection between ticks."""

    abilities = frozenset({Ability.REMOTE, Ability.NARROW})

    def __init__(
        self,
        address: PgAddress,
        password: PasswordSource,
        *,
        timeout: float = SNAPSHOT_TIMEOUT,
        validate_timeout: float = 30.0,
        max_bytes: int = INVENTORY_MAX_BYTES,
        observed: ObservedStateWriter | None = None,
        schema: str = DEFAULT_SCHEMA,
        probe_interval: float = LISTENER_PROBE_INTERVAL,
        checkpoints: CheckpointWriter | None = None,
    ) -> None:
        self.address = address
        self.schema = schema
        self._checkpoints = checkpoints
        self._observed = observed
        self._probe_interval = probe_interval
        self._password = password
        self._timeout = timeout
        self._validate_timeout = validate_timeout
        self._max_bytes = max_bytes
        self._connection: asyncpg.Connection | None = None
        self._last: Inventory | None = None
        self._problems: Sequence[str] = ()
        self._memo = RowMemo()
        self._share: Callable[[str], bool] | None = None
        self._columns: Mapping[str, Sequence[str]] | None = None
        """The columns of the last whole snapshot, when every relation was read whole: what a
        narrow read (``load_marquees``) reads; None: narrow reads wait for such a snapshot."""
        self._loading = asyncio.Lock()  # a tick and a wake-up share the one connection
        self._validating = threading.Lock()
        """Held by the validating thread until it ends, past its timeout too: one at a time."""
        self._validation_late = False
        self.reachable: bool | None = None
        """None before the first read; then whether the last read reached the database."""
        self.last_error: str | None = None
        self.last_snapshot_at: float | None = None
        """``time.monotonic()`` of the last good snapshot."""

    def describe(self) -> str:
        return self.address.describe()

    async def load(self) -> Inventory:
        async with self._loading:
            return await self._load()

    async def _load(self) -> Inventory:
        if self._validating.locked():  # an abandoned validation still runs: start no other
            log.debug("desired_state.still_validating", source=self.describe())
            return self._late(f"a snapshot read earlier is still being validated, past "
                              f"{self._validate_timeout:g} s (inventory_read_timeout)")  # fmt: skip
        try:
            snapshot = await bounded(self._timeout, self._read())
        except SnapshotTooLarge as exc:
            # The database answered: a bad desired state (the engine keeps the last good one and
            # says so once), or, with none yet, one to wait out like an outage.
            self._now_reachable()
            refused = f"{self.describe()}: {exc}"
            raise (DesiredStateUnavailable if self._last is None else InventoryError)(
                refused
            ) from None
        except (DatabaseError, OSError, TimeoutError, asyncpg.PostgresError,
                asyncpg.InterfaceError) as exc:  # fmt: skip
            await self._drop_connection()
            self._unreachable(self._why(exc))
            if self._last is None:  # not a configuration error: the engine waits and retries
                raise DesiredStateUnavailable(f"{self.describe()}: {self.last_error}") from None
            return self._last
        self._now_reachable()
        await self._checkpoint()
        try:
            validated = await self._validate(snapshot)
        except TimeoutError:
            return self._late(
                f"snapshot not validated within {self._validate_timeout:g} s "
                "(inventory_read_timeout)"
            )
        if self._validation_late:
            log.info("desired_state.validation_caught_up", source=self.describe())
            self._validation_late = False
        if list(self._problems) != validated.problems:
            for problem in validated.problems:
                log.error("desired_state.row_refused", source=self.describe(), error=problem)
            if not validated.problems:
                log.info("desired_state.rows_all_valid", source=self.describe())
            self._problems = validated.problems
        # The listing of other shares is no part of the rows the memo compares: an unchanged
        # share with a changed listing gives the same inventory, listing the others anew.
        validated.inventory._elsewhere = snapshot.elsewhere
        validated.inventory._version = snapshot.last_change
        self._last = validated.inventory
        self._columns = None if snapshot.broken else snapshot.columns
        self.last_snapshot_at = time.monotonic()
        return validated.inventory

    def set_share(self, owns: Callable[[str], bool] | None) -> None:
        if owns != self._share:
            # A fresh memo: the next read validates the new share's rows anew rather than keep
            # models of the last read (a whole one, say), which would pin its memory.
            self._memo = RowMemo()
        self._share = owns

    async def load_marquees(self, names: Collection[str]) -> Inventory | None:
        """An inventory of the Marquees ``names`` alone (those whose rows are valid), from a
        narrow read (``read_marquees``): what a wake-up needs, at the cost of their rows, not of
        the fleet's (bench/README.md: change-to-host latency). None when only a whole snapshot
        will do: none read yet, or its relations not all whole; more names than
        ``NARROW_READ_MAX``; the read failed or was refused. The caller then reads it whole.

        Its rows are validated on the loop (a few Marquees' worth: the bound keeps it so), by the
        whole snapshot's memo without changing it; ``load`` goes on serving whole snapshots."""
        if not names or len(names) > NARROW_READ_MAX:
            return None
        async with self._loading:
            if self._columns is None or self._validating.locked():
                return None
            try:
                rows, last_change = await bounded(self._timeout, self._read_narrow(sorted(names)))
            except (SnapshotTooLarge, NarrowReadRefused, DatabaseError, OSError, TimeoutError,
                    asyncpg.PostgresError, asyncpg.InterfaceError) as exc:  # fmt: skip
                await self._drop_connection()  # a transaction cut short: start clean
                log.info("desired_state.narrow_read_failed", source=self.describe(),
                         error=redacted(f"{type(exc).__name__}: {exc}", None)[:300])  # fmt: skip
                return None
            inventory = validate_snapshot(rows, RowMemo(models=self._memo.models)).inventory
            inventory._version = last_change
            return inventory

    async def _read_narrow(self, names: Sequence[str]) -> tuple[Rows, DesiredVersion | None]:
        assert self._columns is not None
        if self._connection is None or self._connection.is_closed():
            self._connection = await connect(self.address, self._password, timeout=self._timeout)
        return await read_marquees(
            self._connection, self.schema, names, self._columns, max_bytes=self._max_bytes
        )

    async def _validate(self, snapshot: Snapshot) -> Validated:
        """``validate_snapshot`` in a thread, bounded by the validation timeout. A thread past it
        is abandoned (it cannot be stopped) but keeps ``_validating`` until it ends, so the loads
        meanwhile start no other: threads never pile up, and the memo has one writer."""
        if not self._validating.acquire(blocking=False):
            raise TimeoutError  # not reached: ``_load`` checked it on this loop
        ran = False

        def validate_and_unlock() -> Validated:
            nonlocal ran
            ran = True
            try:
                return validate_snapshot(snapshot.rows, self._memo, snapshot.broken)
            finally:
                self._validating.release()

        try:
            return await in_thread(
                validate_and_unlock, self._validate_timeout, name="desired-state-validate"
            )
        except TimeoutError:
            raise
        except Exception:
            if not ran:  # the thread did not start: nobody else will release it
                self._validating.release()
            raise

    def _late(self, reason: str) -> Inventory:
        """The last snapshot while validation lags (logged once until one is validated in time
        again), or ``DesiredStateUnavailable`` when there is none yet."""
        if not self._validation_late:
            log.error(
                "desired_state.validation_late",
                source=self.describe(),
                error=reason,
                keeping="last snapshot" if self._last is not None else "nothing",
            )
            self._validation_late = True
        if self._last is None:
            raise DesiredStateUnavailable(f"{self.describe()}: {reason}")
        return self._last

    @property
    def problems(self) -> Sequence[str]:
        """The refused rows of the last snapshot, one line each."""
        return self._problems

    async def _read(self) -> Snapshot:
        if self._connection is None or self._connection.is_closed():
            self._connection = await connect(self.address, self._password, timeout=self._timeout)
        return await read_snapshot(
            self._connection, self.schema, max_bytes=self._max_bytes, share=self._share
        )

    async def _checkpoint(self) -> None:
        """A checkpoint of the change log after a whole read (once a tick: each tick reads the
        whole snapshot), bounded on its own: waiting for another replica's hold of the file,
        or a slow query, never fails the read it follows. Its failures are logged."""
        if self._checkpoints is None or self._connection is None:
            return
        try:
            await bounded(self._timeout, self._checkpoints.take(self._connection, self.schema))
        except TimeoutError:
            log.error("audit.checkpoint_failed", file=str(self._checkpoints.path),
                      error=f"not taken within {self._timeout:g} s")  # fmt: skip
            await self._drop_connection()  # a query cut short: start clean

    def _why(self, exc: BaseException) -> str:
        if isinstance(exc, DatabaseError):
            return str(exc).removeprefix(f"{self.describe()}: ")
        if isinstance(exc, TimeoutError):
            return f"no snapshot within {self._timeout:g} s"
        return redacted(f"{type(exc).__name__}: {exc}", None)

    def _unreachable(self, reason: str) -> None:
        if self.reachable is not False:  # once per change; last_error keeps the latest reason
            log.error(
                "desired_state.unreachable",
                source=self.describe(),
                error=reason,
                keeping="last snapshot" if self._last is not None else "nothing",
            )
        self.reachable = False
        self.last_error = reason

    def _now_reachable(self) -> None:
        if self.reachable is False:
            log.info("desired_state.reachable", source=self.describe())
        self.reachable = True
        self.last_error = None

    async def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.terminate()

    async def listen(self, wake: Wake, resync: Resync) -> None:
        """Until cancelled: wake Marquees whose rows change (LISTEN/NOTIFY, one connection of
        its own), and ``resync`` after the listener had to reconnect."""
        listener = NotificationListener(
            self.address, self._password, timeout=self._timeout, probe_interval=self._probe_interval
        )
        await listener.run(wake, resync)

    def audit_checkpoint_age(self) -> float | None:
        """Seconds since this replica last checkpointed the change log; None when it takes no
        checkpoints (no ``audit_checkpoint_file``)."""
        return None if self._checkpoints is None else self._checkpoints.age()

    def snapshot_age(self) -> float | None:
        """Seconds since the last good snapshot, or None before the first."""
        if self.last_snapshot_at is None:
            return None
        return time.monotonic() - self.last_snapshot_at

    def record_cycle(self, record: CycleRecord) -> None:
        """Hand a finished cycle's observed state over to be written back
        (``ObservedStateWriter``: batched, off the cycle; a failure is logged and counted)."""
        if self._observed is not None:
            self._observed.record(record)

    def write_failures(self) -> int:
        return self._observed.failures if self._observed is not None else 0

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed():
            await connection.close(timeout=self._timeout)
        if self._observed is not None:
            await self._observed.close()
