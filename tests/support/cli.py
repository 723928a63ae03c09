"""The installed ``playguard`` command as tests run it: a real process with the test's settings
file and a clean environment, and what it printed."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playguard_async.coordination.client import connect_redis
from playguard_async.coordination.keys import marquee_lock_name
from playguard_async.coordination.lock import Lease, TokenLock
from playguard_async.settings.sections import DEFAULT_PHASES
from playguard_lab import SshServer
from tests.support.daemon import PLAYGUARD, DaemonRunner, marquee_entry
from tests.support.world import ssh_marquee

LAB_SETTINGS: dict[str, object] = {
    "phases": list(DEFAULT_PHASES),
    "compose_command": ["docker-compose"],
    "lock_ttl": 120.0,
    "redis_socket_timeout": 2.0,
    "ssh_connect_timeout": 5.0,
    "remote_command_timeout": 60.0,
    "docker_api_timeout": 60.0,
    "stuck_after": 2.0,
    "health_grace": 0.5,
}
EXIT_LOCKED, EXIT_NOT_OK = 3, 4


@dataclass
class Playguard:
    """Runs ``playguard`` with the test's settings file and a clean environment."""

    runner: DaemonRunner
    config: Path | None = None

    def configure(self, inventory: Mapping[str, Any], **settings: object) -> None:
        self.runner.inventory.write_text(json.dumps(inventory, indent=1), encoding="utf-8")
        self.config = self.runner.write_settings("cli", self.runner.settings("cli", **settings))

    def argv(self, args: tuple[str, ...]) -> list[str]:
        config = ["--config", str(self.config)] if self.config else []
        return [str(PLAYGUARD), *args, *config]

    def __call__(self, *args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(args),
            capture_output=True,
            text=True,
            env=self.runner.environment(phase_seconds=0.2),
            cwd=self.runner.workdir,
            timeout=timeout,
            check=False,
        )

    def start(self, *args: str, phase_seconds: float) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.runner.environment(phase_seconds),
            cwd=self.runner.workdir,
            start_new_session=True,
        )


def hold_lock(url: str, marquee: str, *, replica: str = "other-replica") -> Lease:
    """Take the Marquee's lock as another replica would, and leave it held (60 s)."""

    async def take() -> Lease | None:
        redis = connect_redis(url)
        try:
            return await TokenLock(
                redis, marquee_lock_name(marquee), 60.0, replica=replica
            ).acquire()
        finally:
            await redis.aclose()

    lease = asyncio.run(take())
    assert lease is not None
    return lease


def assert_one_line_error(done: subprocess.CompletedProcess[str], starts: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith(f"Error: {starts}"), done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def write_mixed_fleet(daemons: DaemonRunner, ssh: SshServer, workdir: Path) -> None:
    """An inventory of four Marquees that end four ways: ``reachable`` converges, ``failing-1``'s
    phase fails, ``gone-1`` cannot be reached (its identity file does not exist) and ``held-1`` is
    locked by another replica."""
    entries = [
        ssh_marquee(ssh, "reachable", workdir / "reachable"),
        ssh_marquee(ssh, "failing-1", workdir / "failing"),
        marquee_entry("gone-1"),
        marquee_entry("held-1"),
    ]
    daemons.inventory.write_text(json.dumps({"marquees": entries}), encoding="utf-8")
    hold_lock(daemons.redis_url, "held-1")
