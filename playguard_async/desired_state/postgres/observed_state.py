"""The observed state written back to PostgreSQL at the end of each cycle, in playguard's schema
only: one row per Marquee (``marquee_status``: outcome, reason, phase, fence, replica, durations,
actions, finished time) and one per Playground the cycle reconciled (``playground_status``: state,
drift, last action, the revision it runs and its last good one, why it is pinned). The
application reads them there, joined to its own rows by name.

A cycle hands its record over and goes on; the writer upserts what has gathered, in batches,
on a connection of its own, each batch bounded by ``desired_state_timeout``. A failure is logged
and counted and never fails a cycle. Values (host output in drift lines, reasons) are bound
parameters: data, never SQL.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import asyncpg
import structlog

from playguard_async.cycle_record import CycleRecord, playground_findings
from playguard_async.desired_state.postgres.connection import (
    DEFAULT_SCHEMA,
    PasswordSource,
    PgAddress,
    connect,
    redacted,
)

log = structlog.get_logger("playguard.observed_state")

_UPSERT_MARQUEE = """
INSERT INTO {schema}.marquee_status (marquee, outcome, reason, phase, fence, replica, cycle,
                                     durations, actions, duration, finished_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11)
ON CONFLICT (marquee) DO UPDATE SET
    outcome = EXCLUDED.outcome, reason = EXCLUDED.reason, phase = EXCLUDED.phase,
    fence = EXCLUDED.fence, replica = EXCLUDED.replica, cycle = EXCLUDED.cycle,
    durations = EXCLUDED.durations, actions = EXCLUDED.actions, duration = EXCLUDED.duration,
    finished_at = EXCLUDED.finished_at
WHERE marquee_status.finished_at <= EXCLUDED.finished_at
"""

_UPSERT_PLAYGROUND = """
INSERT INTO {schema}.playground_status (playground, marquee, state, drift, last_action, cycle,
                                        finished_at, revision, last_good_revision, pinned)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8::jsonb, $9::jsonb, $10)
ON CONFLICT (playground) DO UPDATE SET
    marquee = EXCLUDED.marquee, state = EXCLUDED.state, drift = EXCLUDED.drift,
    last_action = EXCLUDED.last_action, cycle = EXCLUDED.cycle, finished_at = EXCLUDED.finished_at,
    revision = EXCLUDED.revision, last_good_revision = EXCLUDED.last_good_revision,
    pinned = EXCLUDED.pinned
WHERE playground_status.finished_at <= EXCLUDED.finished_at
"""
"""The upserts' ``{schema}`` is playguard's schema, quoted (a validated name, never a value).
A row is never set back to an older cycle's: the replica that ran a Marquee before a hand-over
may write its last cycle after the new one's."""

WRITE_BATCH = 500
"""Records upserted in one transaction. One transaction per cycle, written while the cycle held
its slot, kept 8 replicas of a 100,000-Marquee fleet from cycling it within a tick on two cores
(57,219 of 100,000; bench/README.md, "Observed-state write-back")."""


def playground_rows(record: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Each reconciled Playground of a cycle record, as a ``playground_status`` row (one whose
    finding does not say its state has none: the column holds a state)."""
    finished = datetime.fromtimestamp(record["finished_at"], UTC)
    return [
        (
            name, record["marquee"], found.state, json.dumps(list(found.drift)),
            found.actions[-1] if found.actions else None, record["cycle"], finished,
            _json_or_null(found.revision), _json_or_null(found.last_good_revision), found.pinned,
        )
        for name, found in playground_findings(record["findings"]).items()
        if found.state is not None
    ]  # fmt: skip


def _json_or_null(value: object) -> str | None:
    return None if value is None else json.dumps(value)


class ObservedStateWriter:
    """Upserts finished cycles' status rows, off the cycles: ``record`` hands a record over, and
    one task writes what has gathered meanwhile, on one connection, ``WRITE_BATCH`` records a
    transaction. Unwritten, a Marquee's newer record replaces its older one: the row would hold
    the newer anyway, and what waits stays one record per Marquee, however long PostgreSQL is
    slow or away."""

    def __init__(
        self,
        address: PgAddress,
        password: PasswordSource,
        *,
        replica: str,
        timeout: float,
        schema: str = DEFAULT_SCHEMA,
    ) -> None:
        self.address = address
        quoted = f'"{schema}"'
        self._upsert_marquee = _UPSERT_MARQUEE.format(schema=quoted)
        self._upsert_playground = _UPSERT_PLAYGROUND.format(schema=quoted)
        self._password = password
        self._replica = replica
        self._timeout = timeout
        self._connection: asyncpg.Connection | None = None
        self._pending: dict[str, CycleRecord] = {}
        """Marquee -> its newest record not yet written, oldest hand-over first."""
        self._writer: asyncio.Task[None] | None = None
        self._in_flight: list[CycleRecord] = []
        """The batch being written."""
        self.failures = 0
        """Records whose write failed since start
        (``playguard_observed_state_write_failures_total``)."""

    def record(self, record: CycleRecord) -> None:
        """Hand ``record`` (a ``CycleResult.to_record()``) over to be written soon."""
        self._pending.pop(record["marquee"], None)  # to the end: written after older ones
        self._pending[record["marquee"]] = record
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_pending(), name="observed-state:write")

    async def _write_pending(self) -> None:
        while self._pending:
            names = list(itertools.islice(self._pending, WRITE_BATCH))
            self._in_flight = [self._pending.pop(name) for name in names]
            await self._write_batch(self._in_flight)
            self._in_flight = []

    async def _write_batch(self, batch: list[CycleRecord]) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await self._write(batch)
        except asyncpg.DataError as exc:
            if len(batch) == 1:
                self._failed(batch, exc)
                return
            # A value PostgreSQL refuses (a NUL byte in a host's drift line, say) fails its own
            # record, not the others of its batch: each is written again alone.
            for record in batch:
                await self._write_batch([record])
        except Exception as exc:  # a bug as much as the database: never the writer's end
            self._failed(batch, exc)

    def _failed(self, batch: list[CycleRecord], exc: BaseException) -> None:
        self.failures += len(batch)
        if not isinstance(exc, asyncpg.DataError):  # the connection is sound after those
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.terminate()
        log.warning(
            "observed_state.write_failed",
            records=len(batch),
            marquee=batch[0]["marquee"] if len(batch) == 1 else None,
            error="no answer in time"
            if isinstance(exc, TimeoutError)
            else redacted(f"{type(exc).__name__}: {exc}", None),
        )

    async def _write(self, batch: list[CycleRecord]) -> None:
        if self._connection is None or self._connection.is_closed():
            self._connection = await connect(self.address, self._password, timeout=self._timeout)
        connection = self._connection
        marquees = [
            (
                record["marquee"], record["outcome"], record["reason"], record["phase"],
                record["fence"], self._replica, record["cycle"], json.dumps(record["durations"]),
                sum(len(taken) for taken in record["actions"].values()),
                float(record["duration"]), datetime.fromtimestamp(record["finished_at"], UTC),
            )
            for record in batch
        ]  # fmt: skip
        playgrounds = [row for record in batch for row in playground_rows(record)]
        async with connection.transaction():
            await connection.executemany(self._upsert_marquee, marquees)
            if playgrounds:
                await connection.executemany(self._upsert_playground, playgrounds)

    async def close(self) -> None:
        """Write what was handed over, within ``timeout`` in all (a stop must not wait for a
        database that does not answer: what is left is counted as failed), then disconnect."""
        writer = self._writer
        if writer is not None and not writer.done():
            try:
                async with asyncio.timeout(self._timeout):
                    await asyncio.shield(writer)
            except TimeoutError as exc:
                writer.cancel()
                await asyncio.wait([writer])
                left, self._pending = [*self._in_flight, *self._pending.values()], {}
                if left:
                    self._failed(left, exc)
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed():
            await connection.close(timeout=self._timeout)
