"""``playguard audit verify | prune``: the audit of desired-state changes that PostgreSQL's
triggers keep (migration 0009's ``changes``), checked and cut by the operator; the daemon
neither writes nor deletes it.

``verify`` exits 0 when every chain is intact and 1 naming each changed or missing entry, one
line each (at most ``--limit``, then how many more).
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

    from playguard_async.desired_state.postgres.audit_chain import Verification
    from playguard_async.settings import Settings


@click.group()
def audit() -> None:
    """The audit of desired-state changes in PostgreSQL: verify its hash chains, prune it."""


@audit.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON with stable keys, for scripts.")
@click.option(
    "--limit", type=click.IntRange(1, 10000), default=100, show_default=True,
    help="Problems printed at most; the rest are counted.",
)  # fmt: skip
@CONFIG_OPTION
def verify(as_json: bool, limit: int, config: Path | None) -> None:
    """Walk every chain of playguard.changes: exit 0 when intact, 1 naming each entry changed
    or missing."""
    from playguard_async.desired_state.postgres.audit_chain import verify_changes  # noqa: PLC0415

    async def work(connection: asyncpg.Connection, settings: Settings) -> Verification:
        return await verify_changes(connection, settings.desired_state_schema, limit=limit)

    found = run_on_database(config, work)
    if as_json:
        click.echo(json.dumps({
            "intact": found.intact,
            "entries": found.entries,
            "chains": found.chains,
            "problems": [
                {"chain": p.chain, "seq": p.seq, "id": p.change_id, "problem": p.problem}
                for p in found.problems
            ],
            "more_problems": found.more,
        }, sort_keys=True))  # fmt: skip
    else:
        for problem in found.problems:
            click.echo(problem.line())
        if found.more:
            click.echo(f"... and {found.more} more problems")
        verdict = "intact" if found.intact else "NOT intact"
        click.echo(f"{verdict}: {found.entries} entries in {found.chains} chains")
    if not found.intact:
        raise click.exceptions.Exit(1)


@audit.command()
@CONFIG_OPTION
def prune(config: Path | None) -> None:
    """Cut the entries older than audit_retention_days (0: keep all), leaving each chain an
    anchor so it still verifies. Run by the operator as a role granted DELETE (see the
    project's README, section "Why did this change, in PostgreSQL: the change log")."""
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
