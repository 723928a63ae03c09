"""What a Redis server ran, in its own words (MONITOR), to see a command the network delivered late.

A refused acquire leaves no key and moves no counter, so only the server can say that one ran, and
when: MONITOR stamps each command with the server's clock, the clock an acquire's not-after is
stamped on (``playguard_async.coordination.lock_scripts.ACQUIRE_SCRIPT``).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from playguard_async.coordination.lock_scripts import ACQUIRE_SCRIPT
from playguard_lab import RedisServer, find_binary

ACQUIRE_SHA = hashlib.sha1(ACQUIRE_SCRIPT.encode()).hexdigest()

_LINE = re.compile(r"^(?P<at>\d+\.\d+) \[\d+ (?P<client>[^\]]+)\] (?P<argv>.*)$")


@dataclass(frozen=True)
class Ran:
    """One command as MONITOR printed it."""

    at: float
    """The server's clock when it ran, in seconds."""
    client: str
    argv: tuple[str, ...]

    def late_acquire(self) -> bool:
        """Whether this is the lock's acquire, run after the not-after it carries."""
        if self.argv[:2] != ("EVALSHA", ACQUIRE_SHA) or len(self.argv) < 8:
            return False
        return int(self.argv[-1]) < round(self.at * 1_000_000)


@dataclass
class Monitor:
    """``redis-cli monitor`` writing to ``path`` while it runs."""

    path: Path

    def ran(self) -> list[Ran]:
        commands = []
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            matched = _LINE.match(line)
            if matched is None:
                continue
            with contextlib.suppress(ValueError):
                argv = tuple(shlex.split(matched["argv"]))
                commands.append(Ran(float(matched["at"]), matched["client"], argv))
        return commands

    def late_acquires(self) -> list[Ran]:
        return [command for command in self.ran() if command.late_acquire()]


@contextlib.contextmanager
def monitoring(server: RedisServer, path: Path) -> Iterator[Monitor]:
    """MONITOR on ``server`` for the block's length; the client is ended however it ends."""
    cli = find_binary("redis-cli", "redis-tools")
    with path.open("wb") as output:
        process = subprocess.Popen(
            [cli, "-p", str(server.port), "monitor"], stdout=output, stderr=subprocess.STDOUT
        )
    try:
        yield Monitor(path)
    finally:
        process.terminate()
        process.wait(10)
