"""Every Redis key playguard reads or writes, in one place (arq's ``constants.py`` habit).

An operator with redis-cli, a test that checks what a daemon left behind, and each module that
writes a key all take the names from here, so none of them can drift from the others.

Keys of one lock name share the hash tag ``{name}``, so a lock's scripts touch a single cluster
slot; each Marquee's cycle records share the tag ``{marquee}``, so their pipeline does too.
"""

from __future__ import annotations

PREFIX = "playguard"

RESUME_KEY = f"{PREFIX}:resume"
"""Sorted set of Marquees whose cycle a shutdown interrupted; score: when (Unix seconds)."""

REPLICAS_KEY = f"{PREFIX}:replicas"
REPLICA_VERSIONS_KEY = f"{{{REPLICAS_KEY}}}:versions"
"""Replica id -> the version it runs (``coordination.replicas``); its hash tag is the whole of
``REPLICAS_KEY``, so both are in one Cluster slot."""
"""Sorted set of live replicas (``replica_id``); score: when the announcement expires (Redis's
clock, Unix milliseconds). Read by every replica to split the fleet (``replicas``)."""

FLEET_PAUSE_KEY = f"{PREFIX}:pause"
"""A fleet-wide pause (``pause --all``): JSON of who, why, since, until; expires with it (PX)."""


def lock_key(name: str) -> str:
    """The lock itself: the holder's record, with the lease's TTL."""
    return f"{PREFIX}:{{{name}}}:lock"


def fence_key(name: str) -> str:
    """The lock's fence counter; it never expires, so fences keep growing across holders."""
    return f"{PREFIX}:{{{name}}}:fence"


def once_key(name: str) -> str:
    """The plain NX key of ``service.notifications.once``."""
    return f"{PREFIX}:{{{name}}}:once"


def marquee_lock_name(marquee: str) -> str:
    """The lock name that guards a Marquee's cycles (``lock_key`` of it is the key)."""
    return f"marquee:{marquee}"


def marquee_lock_key(marquee: str) -> str:
    """The key of a Marquee's lock; ``marquee_lock_key("*")`` matches every Marquee's."""
    return lock_key(marquee_lock_name(marquee))


def last_cycle_key(marquee: str) -> str:
    """The record of a Marquee's last finished cycle (JSON)."""
    return f"{PREFIX}:cycles:{{{marquee}}}:last"


CYCLE_ENDED_CHANNEL = f"{PREFIX}:cycles:ended"
"""The Pub/Sub channel a Marquee's name is published on when a record of its cycle is written
(``records.RECORD_SCRIPT``), so every replica's web view reads it again at once."""


def cycle_history_key(marquee: str) -> str:
    """A Marquee's recent cycle records, newest first, capped at ``history_length``."""
    return f"{PREFIX}:cycles:{{{marquee}}}:history"


def containers_seen_key(marquee: str) -> str:
    """What a Marquee's last cycle saw running on its host (``coordination.containers_seen``):
    JSON, written when it changes, expiring after ``SEEN_TTL``; beside its cycle records."""
    return f"{PREFIX}:cycles:{{{marquee}}}:containers"


def health_key(marquee: str) -> str:
    """A Marquee's health as its last telling cycle left it (``ok`` or ``failing``), swapped at
    the end of each cycle so exactly one cycle sees each change (``notify``)."""
    return f"{PREFIX}:cycles:{{{marquee}}}:health"


def pause_key(marquee: str) -> str:
    """A Marquee's pause (``coordination.pause``), in its lock's slot; expires with it (PX)."""
    return f"{PREFIX}:{{{marquee_lock_name(marquee)}}}:pause"


def lifted_key(scope: str) -> str:
    """What ``resume`` leaves of a pause it lifted, until the pause would have ended (PX): how a
    replica that remembers the pause tells a lifted one from one Redis forgot
    (``coordination.pause``). ``lifted_key("*")`` the fleet's."""
    if scope == "*":
        return f"{PREFIX}:pause:lifted"
    return f"{PREFIX}:{{{marquee_lock_name(scope)}}}:pause-lifted"


def pins_key(marquee: str) -> str:
    """A Marquee's pinned Playgrounds (``coordination.pins``): a hash, Playground -> its pin
    (JSON), in its lock's slot, beside its pause."""
    return f"{PREFIX}:{{{marquee_lock_name(marquee)}}}:pins"


def rollback_blocked_key(marquee: str) -> str:
    """A Marquee's rollbacks that could not be made: a hash, Playground -> the fingerprint of
    the last one told (``coordination.told``), in its lock's slot, so each is told once."""
    return f"{PREFIX}:{{{marquee_lock_name(marquee)}}}:rollback-blocked"


ROLLOUTS_KEY = f"{PREFIX}:rollouts"
"""Set of the scopes (``playspec@branch``) that have a rollout record, for ``rollout list``."""


def rollout_key(scope: str) -> str:
    """A scope's rollout record (JSON, ``coordination.rollout_record``); no expiry: a halted
    rollout stays until the next release or an operator."""
    return f"{PREFIX}:{{rollout:{scope}}}:state"


def rollout_marks_key(scope: str) -> str:
    """Set of the Marquees verified healthy at the target of the scope's rollout."""
    return f"{PREFIX}:{{rollout:{scope}}}:healthy"


def rollout_counts_key(scope: str) -> str:
    """Hash: wave index -> how many Marquees of that wave were verified healthy at the target."""
    return f"{PREFIX}:{{rollout:{scope}}}:counts"


def operator_actions_key(scope: str) -> str:
    """What operators did to a Marquee (``coordination.operator_actions``): a capped list of
    JSON entries, newest first, in its lock's slot; ``operator_actions_key("*")`` the fleet's
    (``--all`` pauses, rollout commands)."""
    return f"{PREFIX}:{{{marquee_lock_name(scope)}}}:actions"
