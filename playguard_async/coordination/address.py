"""Where Redis is: one server, a Sentinel group or a Cluster, read from ``redis_url``.

The forms (``rediss`` for TLS in each):

- ``redis://[USER:PASSWORD@]HOST[:PORT][/DB]``: one server.
- ``redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]``: the sentinels'
  addresses and the service (master) name they watch; USER and PASSWORD are the data nodes'. The
  sentinels' own password is the ``redis_sentinel_password`` setting, never part of the URL.
- ``redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]``: startup nodes of a Cluster (any
  reachable one is enough; the client learns the rest). A cluster has no DB but 0.

Parsed here, without any Redis client, so the settings can check a URL before anything connects.
Errors never quote the URL's credentials.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote

RedisMode = Literal["single", "sentinel", "cluster"]

DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379

URL_FORMS = (
    "redis://[USER:PASSWORD@]HOST[:PORT][/DB], "
    "redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB] or "
    "redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...] (rediss... for TLS)"
)

_SCHEMES: dict[str, tuple[RedisMode, bool]] = {
    "redis": ("single", False),
    "rediss": ("single", True),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
}
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<rest>.*)", re.S)
_HOST_PORT = re.compile(
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[^\[\]:,]+))(?::(?P<port>\d{1,5}))?"
)
_DB = r"[0-9]{1,5}"
_SERVICE = r"[A-Za-z0-9_.-]{1,200}"


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """A parsed ``redis_url``: what the client connects to, and how."""

    mode: RedisMode
    tls: bool
    nodes: tuple[tuple[str, int], ...]
    """The server (single), the sentinels (sentinel) or the startup nodes (cluster)."""
    db: int = 0
    service: str = ""
    """The Sentinel service (master) name; empty in the other modes."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def display(self) -> str:
        """The mode and where, without credentials: for ``check`` and logs."""
        where = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.nodes)
        tls = " (TLS)" if self.tls else ""
        if self.mode == "sentinel":
            return f"sentinel {where} service {self.service} db {self.db}{tls}"
        if self.mode == "cluster":
            return f"cluster {where}{tls}"
        return f"single {where} db {self.db}{tls}"


def parse_redis_url(url: str) -> RedisAddress:
    """``url`` as a ``RedisAddress``; ValueError naming the expected forms when it is none."""
    match = _URL.fullmatch(url)
    if match is None or match["scheme"].lower() not in _SCHEMES:
        raise ValueError(f"must be {URL_FORMS}")
    mode, tls = _SCHEMES[match["scheme"].lower()]
    credentials, at, hosts = match["authority"].rpartition("@")
    if "@" in match["rest"] or (at and not credentials and not hosts):
        # Every URL parser splits such a password into path, query or fragment: the host and
        # the password would both be wrong. No piece of it is quoted.
        raise ValueError(
            f"must be {URL_FORMS}; a '#', '/', '?' or '@' in the user or password must be "
            "percent-encoded (%23, %2F, %3F, %40)"
        )
    username, password = _credentials(credentials) if at else (None, None)
    default_port = DEFAULT_SENTINEL_PORT if mode == "sentinel" else DEFAULT_PORT
    nodes = _nodes(hosts, default_port, several=mode != "single")
    rest = match["rest"]
    if mode == "single":
        found = re.fullmatch(rf"(?:/(?P<db>{_DB})?)?", rest)
        if found is None:
            raise ValueError(f"must be {URL_FORMS}; no query or fragment, and DB a number")
        return RedisAddress(mode, tls, nodes, int(found["db"] or 0), "", username, password)
    if mode == "sentinel":
        found = re.fullmatch(rf"/(?P<service>{_SERVICE})(?:/(?P<db>{_DB})?)?", rest)
        if found is None:
            raise ValueError(
                f"must be {URL_FORMS}; a Sentinel URL names its service after the sentinels "
                "(/SERVICE[/DB], letters, digits, '_', '.', '-'), no query or fragment"
            )
        return RedisAddress(
            mode, tls, nodes, int(found["db"] or 0), found["service"], username, password
        )
    if rest not in ("", "/", "/0"):
        raise ValueError(f"must be {URL_FORMS}; a Cluster has only DB 0, no query or fragment")
    return RedisAddress(mode, tls, nodes, 0, "", username, password)


def _credentials(text: str) -> tuple[str | None, str | None]:
    user, colon, password = text.partition(":")
    if not colon:  # ``redis://SECRET@host``: redis-py reads a lone user part as the password
        return None, unquote(user) or None
    return unquote(user) or None, unquote(password) or None


def _nodes(hosts: str, default_port: int, *, several: bool) -> tuple[tuple[str, int], ...]:
    parts = hosts.split(",") if several else [hosts]
    nodes: list[tuple[str, int]] = []
    for part in parts:
        found = _HOST_PORT.fullmatch(part)
        if found is None:
            raise ValueError(
                f"must be {URL_FORMS}; {part[:80]!r} is not HOST[:PORT] "
                "(the port must be a number in 1..65535)"
            )
        port = int(found["port"]) if found["port"] else default_port
        if not 1 <= port <= 65535:
            raise ValueError(f"must be {URL_FORMS}; the port must be a number in 1..65535")
        nodes.append((found["v6"] or found["name"], port))
    return tuple(nodes)
