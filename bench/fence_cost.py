"""What host-side fencing costs, side by side in one run on one SSH connection to a lab sshd.

For each kind of remote call, interleaved round after round so machine noise hits all alike:
- ``raw read``: ``connection.run("true")``, asyncssh alone (one channel, no wrapper);
- ``read, before``: ``timeout --kill-after=5 120 true``, how every command ran before fencing;
- ``read``: ``RemoteSession.run(["true"])``, bounded on the host by the lease (PID line + timeout);
- ``write``: the same append done through ``run``, i.e. unfenced;
- ``fenced write``: the append through ``RemoteSession.change``: host lock, fence check, journal.

Prints per call: wall milliseconds, SSH channels opened, and the host's CPU milliseconds (the
sshd process tree's own and reaped children's time; the lab host is this machine), with ratios to
the unfenced write. A converged cycle makes no write, so fencing adds nothing to it; a fenced
write is still one channel (check and write in one invocation).

    .venv/bin/python bench/fence_cost.py [--rounds 200]

Starts its own sshd from the lab on an ephemeral loopback port. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playguard_async.desired_state.model import Marquee
from playguard_async.remote.ssh import RemoteOptions, RemoteSession, open_session
from playguard_async.service.logs import configure_logging
from playguard_lab import SshServer
from playguard_lab.process import tree_cpu_seconds as tree_cpu


@dataclass
class Lease:
    fence: int = 1
    token: str = field(default_factory=lambda: str(uuid.uuid4()))

    def remaining(self) -> float:
        return 3600.0


@dataclass
class Tally:
    wall: float = 0.0
    host_cpu: float = 0.0
    channels: int = 0
    calls: int = 0


class CountingConnection:
    """Counts the channels a session opens, passing everything through."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self.channels = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    async def create_process(self, *args: Any, **kwargs: Any) -> Any:
        self.channels += 1
        return await self._connection.create_process(*args, **kwargs)

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        self.channels += 1
        return await self._connection.run(*args, **kwargs)


async def measure(rounds: int, ssh: SshServer, sshd_pid: int, workdir: Path) -> dict[str, Tally]:
    marquee = Marquee.model_validate(
        {
            "name": "bench",
            "host": ssh.host,
            "port": ssh.port,
            "user": ssh.user,
            "identity_file": str(ssh.client_key),
            "known_hosts": str(ssh.known_hosts),
            "workdir": str(workdir / "w"),
            "state_dir": str(workdir / "state"),
        }
    )
    record = str(workdir / "record")
    append = ["sh", "-c", 'echo x >> "$1"', "sh", record]
    async with open_session(marquee, RemoteOptions(), lease=Lease()) as session:
        counting = CountingConnection(session.connection)
        session.connection = counting  # type: ignore[assignment]
        calls: dict[str, Callable[[RemoteSession], Awaitable[object]]] = {
            "raw read": lambda s: counting.run("true", check=True),
            "read, before": lambda s: counting.run("timeout --kill-after=5 120 true", check=True),
            "read": lambda s: s.run(["true"]),
            "write": lambda s: s.run(append),
            "fenced write": lambda s: s.change("bench append", append),
        }
        tallies = {name: Tally() for name in calls}
        for call in calls.values():  # warm up: the state directory, caches
            await call(session)
        for _ in range(rounds):
            for name, call in calls.items():
                tally = tallies[name]
                channels, cpu, started = counting.channels, tree_cpu(sshd_pid), time.perf_counter()
                await call(session)
                tally.wall += time.perf_counter() - started
                tally.host_cpu += tree_cpu(sshd_pid) - cpu
                tally.channels += counting.channels - channels
                tally.calls += 1
    return tallies


def report(tallies: dict[str, Tally]) -> None:
    base = tallies["write"]
    print(
        f"{'call':<14}{'wall ms':>9}{'x write':>9}{'host cpu ms':>13}{'x write':>9}{'channels':>10}"
    )
    for name, tally in tallies.items():
        wall = tally.wall / tally.calls * 1000
        cpu = tally.host_cpu / tally.calls * 1000
        print(
            f"{name:<14}{wall:>11.2f}{wall / (base.wall / base.calls * 1000):>11.2f}"
            f"{cpu:>11.2f}{tally.host_cpu / base.host_cpu:>11.2f}"
            f"{tally.channels / tally.calls:>11.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    configure_logging("console", "warning")
    with tempfile.TemporaryDirectory(prefix="pg-bench-") as scratch:
        workdir = Path(scratch)
        with SshServer(workdir / "ssh") as ssh:
            assert ssh.pid is not None
            tallies = asyncio.run(measure(args.rounds, ssh, ssh.pid, workdir))
    print(f"{args.rounds} rounds, one SSH connection, interleaved; host = the lab sshd's tree")
    report(tallies)


if __name__ == "__main__":
    main()
