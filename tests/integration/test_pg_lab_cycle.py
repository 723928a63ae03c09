"""A lab Marquee converged from the desired state in PostgreSQL, through the real phases, SSH
and Docker; the observed state written back names what the cycle found."""

from __future__ import annotations

import asyncio
import os

from playguard_async.desired_state.postgres.schema import migrate
from playguard_async.desired_state.postgres.transfer import import_inventory
from tests.integration.test_cli import phase_counts
from tests.support.cli import LAB_SETTINGS, Playguard
from tests.support.postgres import LabDatabase
from tests.support.world import LabWorld


async def test_a_lab_marquee_converges_from_the_database(
    playguard: Playguard, lab: LabWorld, postgres: LabDatabase
) -> None:
    connection = await postgres.connect()
    try:
        await migrate(connection)
        await import_inventory(connection, playguard.runner.inventory)
        password_file = playguard.runner.workdir / "pg-password"
        password_file.write_text(postgres.password + "\n")
        os.chmod(password_file, 0o600)
        playguard.configure(
            lab.data,
            **LAB_SETTINGS,
            desired_state=postgres.url,
            desired_state_password_file=password_file,
        )
        playguard.runner.inventory.unlink()  # the database is the only desired state

        first = await asyncio.to_thread(playguard, "cycle", "edge-1")
        second = await asyncio.to_thread(playguard, "cycle", "edge-1")

        assert first.returncode == 0, first.stdout + first.stderr
        assert phase_counts(first.stdout)["sync_git"] == 1
        assert second.returncode == 0, second.stdout + second.stderr
        assert set(phase_counts(second.stdout).values()) == {0}, second.stdout
        status = await connection.fetchrow(
            "SELECT * FROM playguard.marquee_status WHERE marquee = 'edge-1'"
        )
        assert (status["outcome"], status["actions"]) == ("ok", 0)
        playgrounds = await connection.fetch("SELECT * FROM playguard.playground_status")
        assert {row["marquee"] for row in playgrounds} == {"edge-1"}
        assert {row["state"] for row in playgrounds} == {"running"}
        assert postgres.password not in first.stdout + first.stderr + second.stdout + second.stderr
    finally:
        await connection.close()
