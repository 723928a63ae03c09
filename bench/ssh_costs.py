"""What an SSH connection costs against a command on an open one, and how sshd's MaxSessions
refuses channels, on a lab sshd (its default MaxSessions, 10): the facts ``remote/pool.py`` and
``remote/ssh.py`` are built on.

- ``connect``: ``asyncssh.connect`` with the lab's key and known_hosts, then close; our process's
  CPU, the sshd tree's CPU (its own and its reaped children's time) and wall, per connection;
- ``command``: ``connection.run("true")`` on one open connection, the same figures per command;
- ``in flight N``: N commands kept in flight on one connection (a new one starts as each ends),
  ``--opens`` in all: the share of channel opens sshd refused (``ChannelOpenError``);
- ``11th channel``: ten ``sleep`` channels held open, then one more: refused or not.

    .venv/bin/python bench/ssh_costs.py [--rounds 50] [--opens 1000] [--in-flight 5,8,10]

Starts its own sshd from the lab on an ephemeral loopback port. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import asyncssh

from playguard_lab import SshServer
from playguard_lab.process import tree_cpu_seconds as tree_cpu


async def connect(ssh: SshServer) -> asyncssh.SSHClientConnection:
    return await asyncssh.connect(
        ssh.host,
        port=ssh.port,
        username=ssh.user,
        client_keys=[str(ssh.client_key)],
        known_hosts=str(ssh.known_hosts),
    )


async def per_connection(ssh: SshServer, sshd: int, rounds: int) -> tuple[float, float, float]:
    """Our CPU, sshd's CPU and wall per connection made and closed, in seconds."""
    ours, host, started = time.process_time(), tree_cpu(sshd), time.perf_counter()
    for _ in range(rounds):
        connection = await connect(ssh)
        connection.close()
        await connection.wait_closed()
    return (
        (time.process_time() - ours) / rounds,
        (tree_cpu(sshd) - host) / rounds,
        (time.perf_counter() - started) / rounds,
    )


async def per_command(
    connection: asyncssh.SSHClientConnection, sshd: int, rounds: int
) -> tuple[float, float, float]:
    """Our CPU, sshd's CPU and wall per ``true`` on an open connection, in seconds."""
    ours, host, started = time.process_time(), tree_cpu(sshd), time.perf_counter()
    for _ in range(rounds):
        await connection.run("true", check=True)
    return (
        (time.process_time() - ours) / rounds,
        (tree_cpu(sshd) - host) / rounds,
        (time.perf_counter() - started) / rounds,
    )


async def refused_share(
    connection: asyncssh.SSHClientConnection, in_flight: int, opens: int
) -> float:
    """The share of ``opens`` channel opens refused with ``in_flight`` kept going at once."""
    left, refused = opens, 0

    async def worker() -> None:
        nonlocal left, refused
        while left > 0:
            left -= 1
            try:
                await connection.run("true", check=True)
            except asyncssh.ChannelOpenError:
                refused += 1

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return refused / opens


async def eleventh_channel(connection: asyncssh.SSHClientConnection) -> str:
    """Ten channels held open, then one more: what sshd answers to the eleventh."""
    held = [await connection.create_process("sleep 30") for _ in range(10)]
    try:
        await connection.run("true", check=True)
        answer = "accepted"
    except asyncssh.ChannelOpenError as exc:
        answer = f"refused: ChannelOpenError({exc.reason!r})"
    finally:
        for process in held:
            process.terminate()
            process.close()
        for process in held:
            await process.wait_closed()
    return answer


async def measure(ssh: SshServer, sshd: int, rounds: int, opens: int, in_flight: list[int]) -> None:
    await per_connection(ssh, sshd, 3)  # warm up: imports, caches
    ours, host, wall = await per_connection(ssh, sshd, rounds)
    print(f"{'':<16}{'our cpu ms':>12}{'sshd cpu ms':>13}{'wall ms':>10}")
    print(f"{'connect':<16}{ours * 1000:>12.1f}{host * 1000:>13.1f}{wall * 1000:>10.1f}")
    async with await connect(ssh) as connection:
        ours, host, wall = await per_command(connection, sshd, rounds)
        print(f"{'command':<16}{ours * 1000:>12.1f}{host * 1000:>13.1f}{wall * 1000:>10.1f}")
        for many in in_flight:
            share = await refused_share(connection, many, opens)
            print(f"in flight {many:<3} {share * 100:5.1f} % of {opens} opens refused")
        print(f"11th channel: {await eleventh_channel(connection)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--opens", type=int, default=1000)
    parser.add_argument("--in-flight", default="5,8,10", help="commands in flight, comma-separated")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="pg-bench-") as scratch,
        SshServer(Path(scratch) / "ssh") as ssh,
    ):
        assert ssh.pid is not None
        in_flight = [int(many) for many in args.in_flight.split(",")]
        asyncio.run(measure(ssh, ssh.pid, args.rounds, args.opens, in_flight))


if __name__ == "__main__":
    main()
