"""The observed state written back to PostgreSQL at the end of each cycle, in playguard's schema
only: one row per Marquee (``marquee_status``: outcome, reason, phase, fence, replica, durations,
actions, finished time) and one per Playground the cycle reconciled (``playground_status``: state,
drift, last action). The application reads them there, joined to its own rows by name.

A write runs after the lock's release (it is a cycle listener), on a connection of its own,
bounded by ``desired_state_timeout``; a failure is logged and counted and never fails a cycle.
Values (host output in drift lines, reasons) are bound parameters: data, never SQL.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import asyncpg
import structlog

from playguard_async.cycle_record import CycleRecord
from playguard_async.desired_state.pg import (
    DEFAULT_SCHEMA,
    DatabaseError,
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
"""

_UPSERT_PLAYGROUND = """
INSERT INTO {schema}.playground_status (playground, marquee, state, drift, last_action, cycle,
                                        finished_at)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7)
ON CONFLICT (playground) DO UPDATE SET
    marquee = EXCLUDED.marquee, state = EXCLUDED.state, drift = EXCLUDED.drift,
    last_action = EXCLUDED.last_action, cycle = EXCLUDED.cycle, finished_at = EXCLUDED.finished_at
"""
"""The upserts' ``{schema}`` is playguard's schema, quoted (a validated name, never a value)."""


def playground_rows(record: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Each reconciled Playground of a cycle record, as a ``playground_status`` row."""
    finished = datetime.fromtimestamp(record["finished_at"], UTC)
    rows = []
    for findings in record["findings"].values():
        playgrounds = findings.get("playgrounds") if isinstance(findings, dict) else None
        for name, found in (playgrounds or {}).items():
            actions = found.get("actions") or []
            rows.append((
                name, record["marquee"], str(found.get("state")),
                json.dumps(list(found.get("drift") or [])),
                str(actions[-1]) if actions else None, record["cycle"], finished,
            ))  # fmt: skip
    return rows


class ObservedStateWriter:
    """Upserts a finished cycle's status rows; one connection, one write at a time."""

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
        self._writing = asyncio.Lock()
        self.failures = 0
        """Writes that failed since start (``playguard_observed_state_write_failures``)."""

    async def record(self, record: CycleRecord) -> None:
        """Write ``record`` (a ``CycleResult.to_record()``); logs and counts a failure."""
        try:
            async with self._writing, asyncio.timeout(self._timeout):
                await self._write(record)
        except (DatabaseError, OSError, TimeoutError, asyncpg.PostgresError,
                asyncpg.InterfaceError) as exc:  # fmt: skip
            self.failures += 1
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.terminate()
            log.warning(
                "observed_state.write_failed",
                marquee=record["marquee"],
                error="no answer in time"
                if isinstance(exc, TimeoutError)
                else redacted(f"{type(exc).__name__}: {exc}", None),
            )

    async def _write(self, record: CycleRecord) -> None:
        if self._connection is None or self._connection.is_closed():
            self._connection = await connect(self.address, self._password, timeout=self._timeout)
        connection = self._connection
        actions = sum(len(taken) for taken in record["actions"].values())
        async with connection.transaction():
            await connection.execute(
                self._upsert_marquee,
                record["marquee"], record["outcome"], record["reason"], record["phase"],
                record["fence"], self._replica, record["cycle"], json.dumps(record["durations"]),
                actions, float(record["duration"]),
                datetime.fromtimestamp(record["finished_at"], UTC),
            )  # fmt: skip
            rows = playground_rows(record)
            if rows:
                await connection.executemany(self._upsert_playground, rows)

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed():
            await connection.close(timeout=self._timeout)
