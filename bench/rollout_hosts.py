"""What an operator's rollout action costs now that it is put on the hosts of its scope before it
reports (``operator.rollout_hosts.carry_to_hosts``): wall time, this process's CPU, the sshd's
CPU and the SSH channels opened, per Marquee of the scope.

``--marquees`` Marquees on one lab sshd (each its own state directory, as the rollout tests'
Marquees share one), one Playground each, all of one staged scope, a lab redis-server for the
locks. Two rounds: ``first`` writes the record to hosts that have no copy yet (per Marquee: its
lock, an SSH connection, one read of its copies, one fenced write); ``again`` carries the same
record (a read, nothing to write). ``max_concurrent_cycles`` is 8: one sshd for every Marquee,
whose ``MaxStartups`` (10) drops connections past ten unauthenticated at once (a fleet's
Marquees are hosts of their own).

    .venv/bin/python bench/rollout_hosts.py [--marquees 20]

Starts its own sshd and redis-server from the lab on ephemeral loopback ports. Never part of the
tests.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncssh

from playguard_async.coordination.client import connect_redis
from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.rollout_policy import RolloutPolicy, Wave
from playguard_async.operator.rollout_hosts import carry_to_hosts
from playguard_async.phases.rollout_record import Rollout
from playguard_async.service.logs import configure_logging
from playguard_async.settings import load_settings
from playguard_lab import RedisServer, SshServer
from playguard_lab.process import tree_cpu_seconds as tree_cpu

CHANNELS = [0]
"""SSH channels (sessions) opened by this process, counted at ``create_session``."""


def count_channels() -> None:
    opened = asyncssh.SSHClientConnection.create_session

    async def counted(self: asyncssh.SSHClientConnection, *args: Any, **kwargs: Any) -> Any:
        CHANNELS[0] += 1
        return await opened(self, *args, **kwargs)

    asyncssh.SSHClientConnection.create_session = counted  # type: ignore[method-assign]


def inventory(ssh: SshServer, scratch: Path, marquees: int) -> Inventory:
    names = [f"m{index}" for index in range(marquees)]
    return Inventory.model_validate({
        "marquees": [
            {"name": name, "host": ssh.host, "port": ssh.port, "user": ssh.user,
             "identity_file": str(ssh.client_key), "known_hosts": str(ssh.known_hosts),
             "workdir": str(scratch / name), "state_dir": str(scratch / f"{name}-state")}
            for name in names
        ],
        "playspecs": [{"name": "web", "repo": "https://git.example/web.git",
                       "rollout": {"waves": [1, "100%"]}}],
        "playgrounds": [{"name": f"web-{name}", "playspec": "web", "marquee": name,
                         "branch": "main"} for name in names],
    })  # fmt: skip


async def measure(ssh: SshServer, redis_url: str, scratch: Path, marquees: int) -> None:
    assert ssh.pid is not None
    settings = load_settings(
        None, redis_url=redis_url, ssh_connect_timeout=5.0, max_concurrent_cycles=8
    )
    redis = connect_redis(redis_url)
    fleet = inventory(ssh, scratch, marquees)
    waves = (Wave("0", 1), Wave("~", marquees - 1))
    record = Rollout.open("web@main", "a" * 64, None, RolloutPolicy(waves=[1, "100%"]), waves,
                          now=1e9).stored_over(None)  # fmt: skip
    count_channels()
    print(f"{'round':<7}{'marquees':>9}{'carry':>7}{'wall s':>8}{'wall/marquee ms':>17}"
          f"{'our cpu/marquee ms':>20}{'sshd cpu/marquee ms':>21}"
          f"{'channels/marquee':>18}")  # fmt: skip
    try:
        for name in ("first", "again"):
            CHANNELS[0] = 0
            ours, host, started = time.process_time(), tree_cpu(ssh.pid), time.perf_counter()
            hosts = await carry_to_hosts(settings, redis, fleet, record)
            wall = time.perf_counter() - started
            ours, host = time.process_time() - ours, tree_cpu(ssh.pid) - host
            carrying = sum(h.carries for h in hosts)
            for missed in (h for h in hosts if not h.carries):
                print(f"  {missed.marquee}: {missed.detail}")
            print(f"{name:<7}{marquees:>9}{carrying:>7}{wall:>8.2f}{wall / marquees * 1e3:>17.1f}"
                  f"{ours / marquees * 1e3:>20.1f}{host / marquees * 1e3:>21.1f}"
                  f"{CHANNELS[0] / marquees:>18.1f}")  # fmt: skip
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--marquees", type=int, default=20)
    args = parser.parse_args()
    configure_logging("console", "warning")
    with (
        tempfile.TemporaryDirectory(prefix="pg-bench-") as scratch,
        SshServer(Path(scratch) / "ssh") as ssh,
        RedisServer(Path(scratch) / "redis") as redis,
    ):
        asyncio.run(measure(ssh, redis.url, Path(scratch), args.marquees))


if __name__ == "__main__":
    main()
