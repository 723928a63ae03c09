"""A real ``playguard run`` over two lab hosts whose desired state is a Rails-style application's
own rows, read through views as a role limited to playguard's schema: the Marquees converge, the
app's UPDATE of its playgrounds row reaches the host through its trigger's NOTIFY (no tick), and
a view broken by its owner stops only the Marquees whose rows it holds."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiodocker

from playguard_async.desired_state.postgres.schema import migrate
from playguard_async.desired_state.postgres.transfer import import_inventory
from playguard_lab import DockerDaemon, GitOrigin, SshServer
from tests.support.app_database import (
    AGENT_CHATS_VIEW,
    TRIGGERS,
    AppFleet,
    LimitedRole,
    create_app,
    execute_in,
    limited_role,
    mapping_sql,
)
from tests.support.cli import LAB_SETTINGS, Playguard
from tests.support.daemon import Daemon, wait_for
from tests.support.pg_inventory import write_inventory
from tests.support.playgrounds import checkout_head, compose_yaml, project_containers
from tests.support.postgres import LabDatabase
from tests.support.world import LabWorld, lab_marquee_fields

CONVERGE_TIMEOUT = 180.0
"""The first cycles clone, pull and start containers on two hosts of a busy 2-core machine."""


def _app_fleet(lab: LabWorld, second: tuple[SshServer, DockerDaemon], workdir: Path) -> AppFleet:
    """The lab's world as the application keeps it: edge-1 (web-main and chat-1) and edge-2
    (the second lab host, web-two, no chat)."""
    first = lab.data["marquees"][0]
    other = {**lab_marquee_fields(*second, workdir), "name": "edge-2"}
    playground = lab.data["playgrounds"][0]
    return AppFleet(
        marquees=[first, other],
        playgrounds=[playground, {**playground, "name": "web-two", "marquee": "edge-2"}],
        agent_chats=list(lab.data["agent_chats"]),
    )


def _ok_cycles(daemon: Daemon, marquee: str) -> int:
    return len(daemon.events("cycle.finished", marquee=marquee, outcome="ok"))


async def _written_back(role: LimitedRole) -> list[tuple[str, str]]:
    """The status rows once both Marquees have one (written just after each cycle's end)."""
    connection = await role.database.connect()
    try:
        deadline = time.monotonic() + 10
        while True:
            rows = await connection.fetch(
                "SELECT marquee, outcome FROM playguard.marquee_status ORDER BY marquee"
            )
            if len(rows) == 2 or time.monotonic() > deadline:
                return [tuple(row) for row in rows]
            await asyncio.sleep(0.1)
    finally:
        await connection.close()


async def test_a_daemon_runs_the_apps_rows_through_views_and_wakes_on_its_writes(
    playguard: Playguard, lab: LabWorld, postgres: LabDatabase, git_origin: GitOrigin,
    second_host: tuple[SshServer, DockerDaemon], lab_docker: aiodocker.Docker,
    busybox_image: str, tmp_path: Path,
) -> None:  # fmt: skip
    fleet = _app_fleet(lab, second_host, tmp_path / "workdir-2")
    await create_app(postgres, fleet)
    own = {"registries": lab.data["registries"], "playspecs": lab.data["playspecs"]}
    async with limited_role(postgres) as role:
        connection = await role.database.connect()
        try:
            await migrate(connection)
            await import_inventory(connection, write_inventory(tmp_path, own, "own.yaml"))
            await connection.execute(mapping_sql(fleet))
        finally:
            await connection.close()
        await execute_in(postgres, TRIGGERS)
        password_file = tmp_path / "pg-password"
        password_file.write_text(role.database.password + "\n")
        password_file.chmod(0o600)
        runner = playguard.runner
        runner.inventory.unlink(missing_ok=True)  # the database is the only desired state
        settings = runner.settings(
            "r1", **LAB_SETTINGS, tick_interval=600.0, tick_jitter=0.0,
            desired_state=role.database.url, desired_state_password_file=password_file,
        )  # fmt: skip
        daemon = runner.start("r1", phase_seconds=0.2, config=runner.write_settings("r1", settings))
        try:
            await _converge_wake_and_break(daemon, postgres, role, lab, git_origin, lab_docker,
                                           busybox_image)  # fmt: skip
            assert runner.stop_all([daemon], timeout=30) == {"r1": 0}
        finally:
            runner.kill_all()
        assert role.database.password not in daemon.stderr()


async def _converge_wake_and_break(
    daemon: Daemon, postgres: LabDatabase, role: LimitedRole, lab: LabWorld,
    git_origin: GitOrigin, lab_docker: aiodocker.Docker, busybox_image: str,
) -> None:  # fmt: skip
    wait_for(
        lambda: _ok_cycles(daemon, "edge-1") >= 1 and _ok_cycles(daemon, "edge-2") >= 1,
        timeout=CONVERGE_TIMEOUT, what=f"both Marquees converged:\n{daemon.stderr_tail()}",
    )  # fmt: skip
    assert daemon.events("desired_state.listening")
    assert await project_containers(lab_docker), "edge-1's playground runs"
    assert await _written_back(role) == [("edge-1", "ok"), ("edge-2", "ok")]

    # The application moves its playground to a new branch: only its trigger tells playguard.
    branch = f"moved-{time.monotonic_ns()}"
    head = git_origin.commit(branch, {"compose.yaml": compose_yaml(busybox_image)}, "Moved")
    before = _ok_cycles(daemon, "edge-1")
    await execute_in(postgres, f"UPDATE public.playgrounds SET branch = '{branch}', "
                            "updated_at = now() WHERE name = 'web-main'")  # fmt: skip
    updated = time.monotonic()
    wait_for(lambda: _ok_cycles(daemon, "edge-1") > before, timeout=60,
             what="edge-1's cycle after the app's UPDATE")  # fmt: skip
    reached = time.monotonic() - updated
    lab.data["playgrounds"][0]["branch"] = branch
    assert checkout_head(git_origin, lab) == head
    assert any(line["started"] == ["cycle:edge-1"] for line in daemon.events("engine.woken"))
    assert reached < 30, f"the host had the new branch {reached:.1f} s after the UPDATE"

    # The owner breaks the chats' view: edge-1 (it has a chat) stops, edge-2 keeps cycling.
    edge_1, edge_2 = _ok_cycles(daemon, "edge-1"), _ok_cycles(daemon, "edge-2")
    await execute_in(role.database, "DROP VIEW playguard.agent_chats;"
                         + AGENT_CHATS_VIEW.replace("c.image, ", ""))  # fmt: skip
    await execute_in(postgres, "UPDATE public.marquees SET updated_at = now()")  # wakes both
    wait_for(lambda: _ok_cycles(daemon, "edge-2") > edge_2, timeout=60,
             what="edge-2's cycle after the view broke")  # fmt: skip
    refused = [line["error"] for line in daemon.events("desired_state.row_refused")]
    assert "playguard.agent_chats: column image missing" in refused
    assert "marquees 'edge-1': left out of this snapshot (a row it needs is bad)" in refused
    assert _ok_cycles(daemon, "edge-1") == edge_1, "edge-1 stopped"
    assert len(daemon.events("cycle.finished", marquee="edge-1")) == edge_1
    assert await project_containers(lab_docker), "and what runs on it is left alone"
