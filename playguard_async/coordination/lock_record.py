"""The record a lock key holds: who holds it (``Holder``), written at each acquisition
(``new_record``) and read back by operators (``lock_state``). One format, in one place, so the
writer and the readers cannot drift apart.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a lock, as operators read it from the lock key."""

    token: str
    replica: str
    host: str
    pid: int
    acquired_at: str

    def encode(self) -> str:
        return json.dumps(
            {
                "token": self.token,
                "replica": self.replica,
                "host": self.host,
                "pid": self.pid,
                "acquired_at": self.acquired_at,
            },
            separators=(",", ":"),
        )

    @classmethod
    def parse(cls, raw: str | bytes) -> Holder | None:
        """The holder a lock key names, or None when it holds anything else: a key is outside
        input (another program, an operator's SET), and reading it must never fail."""
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            return None
        texts = ("token", "replica", "host", "acquired_at")
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in texts):
            return None
        pid = data.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool):
            return None
        return cls(
            token=data["token"],
            replica=data["replica"],
            host=data["host"],
            pid=pid,
            acquired_at=data["acquired_at"],
        )


_HOST = socket.gethostname()
"""Read once: a lock record names the machine, and asking the kernel per acquire costs."""


@functools.lru_cache(maxsize=16)
def _holder_fields(replica: str, pid: int) -> str:
    """The record's ``replica``, ``host`` and ``pid`` members as ``Holder.encode`` writes them
    (JSON-escaped), without the braces; the pid is a key, so a forked child writes its own."""
    members = json.dumps({"replica": replica, "host": _HOST, "pid": pid}, separators=(",", ":"))
    return members[1:-1]


def new_record(replica: str) -> tuple[str, str]:
    """A fresh token and the record naming it and ``replica``: ``Holder.encode``'s text, built
    around the part that is the same for every acquisition of this process (a ``Holder`` and a
    json.dumps per acquisition cost more than the rest of taking a lock; bench/README.md)."""
    token = uuid.uuid4().hex
    acquired_at = datetime.now(UTC).isoformat(timespec="milliseconds")
    fields = _holder_fields(replica, os.getpid())
    return token, f'{{"token":"{token}",{fields},"acquired_at":"{acquired_at}"}}'
