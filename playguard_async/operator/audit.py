"""``playguard audit verify | checkpoint | prune``: the audit of desired-state changes that
PostgreSQL's triggers keep (migration 0009's ``changes``), checked, checkpointed and cut by the
operator; the daemon neither writes nor deletes it, and checkpoints it when configured.

``verify`` exits 0 when every chain is intact and 1 naming each changed or missing entry, one
line each (at most ``--limit``, then how many more); with ``audit_checkpoint_file`` set, the
chains are checked against its signed checkpoints too, and it says how old the newest is.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from playguard_async.operator.db import run_on_database
from playguard_async.operator.options import CONFIG_OPTION

if TYPE_CHECKING:
    import asyncpg

    from playguard_async.desired_state.postgres.audit_chain import LogOwner, Verification
    from playguard_async.desired_state.postgres.audit_checkpoint import CheckpointLog
    from playguard_async.settings import Settings


@click.group()
def audit() -> None:
    """The audit of desired-state changes in PostgreSQL: verify its hash chains, checkpoint
    their heads outside the database, prune it."""


def _checkpoint_log(settings: Settings) -> CheckpointLog | None:
    """The settings' checkpoints folded (None: none configured); a key or file that cannot be
    read is a one-line error."""
    from playguard_async.desired_state.postgres.audit_checkpoint import (  # noqa: PLC0415
        CheckpointError,
        read_checkpoints,
        read_key,
    )
    from playguard_async.desired_state.postgres.connection import DatabaseError  # noqa: PLC0415

    if settings.audit_checkpoint_file is None or settings.audit_checkpoint_key_file is None:
        return None
    try:
        key = read_key(settings.audit_checkpoint_key_file)
        return read_checkpoints(settings.audit_checkpoint_file, key)
    except CheckpointError as exc:
        raise DatabaseError(str(exc)) from None


def _checkpoint_said(log: CheckpointLog | None, now: float) -> tuple[str, dict[str, object]]:
    """A line on the checkpoints verify used, and the same as JSON."""
    from playguard_async.operator.display import span  # noqa: PLC0415

    if log is None:
        return ("no checkpoints (audit_checkpoint_file unset): a chain rewritten whole, its "
                "end cut or a chain deleted would pass", {"configured": False})  # fmt: skip
    if log.newest is None:
        return "no checkpoint yet", {"configured": True, "newest_at": None, "lines": log.lines}
    age = max(0.0, now - log.newest.at)
    return (f"newest checkpoint {span(age)} old ({log.lines} lines): what changed since is "
            "checked by its hashes alone", {"configured": True, "newest_at": log.newest.at,
                                            "age": age, "lines": log.lines})  # fmt: skip


@audit.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON with stable keys, for scripts.")
@click.option(
    "--limit", type=click.IntRange(1, 10000), default=100, show_default=True,
    help="Problems printed at most; the rest are counted.",
)  # fmt: skip
@CONFIG_OPTION
def verify(as_json: bool, limit: int, config: Path | None) -> None:
    """Walk every chain of playguard.changes: exit 0 when intact, 1 naming each entry changed
    or missing; against the signed checkpoints too when audit_checkpoint_file is set."""
    import time  # noqa: PLC0415

    from playguard_async.desired_state.postgres.audit_chain import (  # noqa: PLC0415
        log_owner,
        verify_changes,
    )

    async def work(
        connection: asyncpg.Connection, settings: Settings
    ) -> tuple[Verification, CheckpointLog | None, LogOwner | None]:
        log = _checkpoint_log(settings)
        found = await verify_changes(
            connection, settings.desired_state_schema, limit=limit, checkpoints=log
        )
        return found, log, await log_owner(connection, settings.desired_state_schema)

    found, log, owner = run_on_database(config, work)
    said, checkpoint = _checkpoint_said(log, time.time())
    problems = [] if log is None else log.problems
    intact = found.intact and not problems
    if as_json:
        click.echo(json.dumps({
            "intact": intact,
            "checkpoint": {**checkpoint, "problems": problems},
            "entries": found.entries,
            "chains": found.chains,
            "problems": [
                {"chain": p.chain, "seq": p.seq, "id": p.change_id, "problem": p.problem}
                for p in found.problems
            ],
            "more_problems": found.more,
            "owner": None if owner is None else {"role": owner.role, "logs_in": owner.logs_in},
        }, sort_keys=True))  # fmt: skip
    else:
        for line in [*problems, *(problem.line() for problem in found.problems)]:
            click.echo(line)
        if found.more:
            click.echo(f"... and {found.more} more problems")
        if owner is not None:
            click.echo(owner.line())
        click.echo(said)
        verdict = "intact" if intact else "NOT intact"
        click.echo(f"{verdict}: {found.entries} entries in {found.chains} chains")
    if not intact:
        raise click.exceptions.Exit(1)


@audit.command()
@CONFIG_OPTION
def checkpoint(config: Path | None) -> None:
    """Append a signed checkpoint of every chain's head that moved to audit_checkpoint_file, as
    the daemon does each tick."""
    from playguard_async.desired_state.postgres.audit_checkpoint import (  # noqa: PLC0415
        CheckpointError,
        read_key,
        take_checkpoint,
    )
    from playguard_async.desired_state.postgres.connection import DatabaseError  # noqa: PLC0415

    async def work(connection: asyncpg.Connection, settings: Settings) -> str:
        if settings.audit_checkpoint_file is None or settings.audit_checkpoint_key_file is None:
            raise DatabaseError("audit_checkpoint_file and audit_checkpoint_key_file are not set")
        try:
            key = read_key(settings.audit_checkpoint_key_file)
            taken = await take_checkpoint(connection, settings.desired_state_schema,
                                          settings.audit_checkpoint_file, key)  # fmt: skip
        except CheckpointError as exc:
            raise DatabaseError(str(exc)) from None
        return (f"checkpointed {len(taken.heads)} chain heads up to id {taken.high} in "
                f"{settings.audit_checkpoint_file}")  # fmt: skip

    click.echo(run_on_database(config, work))


@audit.command()
@CONFIG_OPTION
def prune(config: Path | None) -> None:
    """Cut the entries older than audit_retention_days (0: keep all), leaving each chain an
    anchor so it still verifies. Run by the operator as a role granted DELETE (see the docs,
    page operations/why.md, section "Why did this change, in PostgreSQL: the change log")."""
    from playguard_async.desired_state.postgres.audit_chain import prune_changes  # noqa: PLC0415

    async def work(connection: asyncpg.Connection, settings: Settings) -> str:
        days = settings.audit_retention_days
        if days == 0:
            return "audit_retention_days is 0: every entry is kept"
        cut = await prune_changes(
            connection, settings.desired_state_schema, older_than=timedelta(days=days)
        )
        return f"cut {sum(cut.values())} entries older than {days} days from {len(cut)} chains"

    click.echo(run_on_database(config, work))
