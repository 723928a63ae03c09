"""A Redis black hole in a network namespace of its own: what the daemon's Redis client does when
the server's packets are dropped (no reset), as a firewall or a dead host does.

Run inside ``unshare -n`` (``python -m tests.support.black_hole KEEPALIVE``): the namespace's
loopback is private, so its iptables rules touch nothing else, and namespace and rules vanish
with the process. It starts a lab redis-server there, connects with ``connect_redis(keepalive=
KEEPALIVE)``, uses the command channel's connection and a pooled one, then drops every packet to
and from Redis's port, sends one more SET into the hole (it times out), and prints one JSON line:

- ``dead_after``: seconds after the drop until the kernel had ended every client connection to
  Redis (none left ESTABLISHED), or null if some were still open after ``KEEPALIVE + 5`` s;
- ``late_write``: once the drop is lifted (and 3 s waited), whether the SET abandoned in the
  hole reached Redis after all (only looked at when they were ended).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from redis import Redis as SyncRedis

from playguard_async.coordination.channel import ChannelledRedis
from playguard_async.coordination.client import connect_redis
from playguard_lab import RedisServer

ESTABLISHED = "01"


def established_to(port: int) -> int:
    """Client sockets (remote port ``port``) in state ESTABLISHED, from the kernel's table."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote_port = int(fields[2].split(":")[1], 16)
        if remote_port == port and fields[3] == ESTABLISHED:
            count += 1
    return count


def drop(port: int, action: str) -> None:
    """Add (``-A``) or remove (``-D``) the rules that drop Redis's packets both ways."""
    for match in ("--dport", "--sport"):
        subprocess.run(
            ["iptables", action, "INPUT", "-p", "tcp", match, str(port), "-j", "DROP"], check=True
        )


async def probe(server: RedisServer, keepalive: float) -> dict[str, object]:
    client = connect_redis(server.url, socket_timeout=1.0, connect_timeout=1.0, keepalive=keepalive)
    assert isinstance(client, ChannelledRedis)
    try:
        assert await client.channel.send("PING") == b"PONG"
        assert await client.ping()
        assert established_to(server.port) == 2
        drop(server.port, "-A")
        dropped = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await client.channel.send("SET", "late-write", "1", timeout=1.0)
        dead_after = None
        while time.monotonic() - dropped < keepalive + 5:
            if established_to(server.port) == 0:
                dead_after = round(time.monotonic() - dropped, 2)
                break
            await asyncio.sleep(0.1)
        drop(server.port, "-D")
        late_write = None
        if dead_after is not None:
            await asyncio.sleep(3)
            with SyncRedis(port=server.port, socket_timeout=2) as direct:
                late_write = direct.exists("late-write") == 1
        return {"dead_after": dead_after, "late_write": late_write}
    finally:
        await client.aclose()


def main() -> None:
    keepalive = float(sys.argv[1])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with tempfile.TemporaryDirectory(prefix="black-hole-") as workdir:
        server = RedisServer(Path(workdir))
        server.start()
        try:
            print(json.dumps(asyncio.run(probe(server, keepalive))))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
