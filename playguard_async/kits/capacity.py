"""How many cycles one replica runs at once when the operator does not say: what it can hold open.

A cycle spends nearly all its time waiting on its host (SSH round trips, image pulls, compose),
so CPU is not what bounds how many run at once; open files are. A running cycle holds its SSH
connection, the local end of its Docker API tunnel and a share of the Redis pool; the SSH pool
keeps one idle connection per Marquee besides. The old fixed default of 16 capped a fleet of
converged 20-Playground Marquees at 39 cycles a minute while the CPU idled.

The daemon first lifts its soft limit of open files to the hard one (systemd's default soft limit
is 1024, its hard one far higher), then gives cycles what the idle SSH pool, the Redis pool and a
reserve leave, ``FILES_PER_CYCLE`` each, between ``MIN_SLOTS`` and ``MAX_SLOTS``, and no more than
the Redis pool has connections: more cycles than connections queue for them, and redis-py's pool
is not fair (a woken waiter can lose its turn to a newcomer), so with 1,024 no-op cycles on 50
connections some waited past ``redis_socket_timeout`` and their leases read as lost
(``bench/dispatch.py``).
"""

from __future__ import annotations

import resource

MAX_SECONDS = 7 * 24 * 3600.0
"""Upper bound of every duration setting (7 days): past it a value is a typo (or ``inf``), and
Redis, asyncio and the lease arithmetic would fail on it at run time instead of at start-up."""

FILES_PER_CYCLE = 4
"""The SSH socket, the tunnel's listening and accepted sockets, and one spare (a pull's stream)."""

RESERVED_FILES = 64
"""Logs, the HTTP endpoints, the inventory read, Python's own."""

MIN_SLOTS = 16
MAX_SLOTS = 1024
"""Past about a thousand cycles in flight one event loop spends more time switching than waiting."""

OPEN_FILES_CEILING = 1 << 20
"""The soft limit is raised no further than this, whatever the hard one says (maybe infinite)."""


def raise_open_files_limit() -> int:
    """Lift the soft limit of open files to the hard one (up to ``OPEN_FILES_CEILING``); return the
    soft limit in force after it (an infinite one as ``OPEN_FILES_CEILING``)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_CEILING if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_CEILING)
    if soft == resource.RLIM_INFINITY:
        return OPEN_FILES_CEILING
    if soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            return soft
        return wanted
    return soft


def open_files_limit() -> int:
    """The soft limit of open files now (an infinite one as ``OPEN_FILES_CEILING``)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return OPEN_FILES_CEILING if soft == resource.RLIM_INFINITY else soft


def cycle_slots(
    *, ssh_pool_size: int, redis_connections: int, open_files: int | None = None
) -> int:
    """Cycles that fit in ``open_files`` (the current soft limit by default) beside the pools."""
    if open_files is None:
        open_files = open_files_limit()
    spare = open_files - ssh_pool_size - redis_connections - RESERVED_FILES
    return max(MIN_SLOTS, min(MAX_SLOTS, redis_connections, spare // FILES_PER_CYCLE))


MIN_HTTP_CONNECTIONS = 8
"""Connections the HTTP server is given however few files the cycles leave: the probes must be
answerable, or a supervisor restarts a replica that only lacks room."""


def engine_files(*, slots: int, ssh_pool_size: int, redis_connections: int) -> int:
    """Files the engine may hold at once: ``slots`` cycles, the idle SSH pool, the Redis pool and
    the reserve."""
    return slots * FILES_PER_CYCLE + ssh_pool_size + redis_connections + RESERVED_FILES


def http_connection_room(wanted: int, *, open_files: int, engine_needs: int) -> int:
    """Connections the HTTP server may hold: ``wanted``, but no more than the files ``open_files``
    leaves beside ``engine_needs`` (but never below ``MIN_HTTP_CONNECTIONS``), so no client of the
    HTTP server can take a file a cycle needs."""
    return min(wanted, max(MIN_HTTP_CONNECTIONS, open_files - engine_needs))
