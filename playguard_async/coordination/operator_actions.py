"""What operators did, kept as events: pause, resume, pin, unpin, unlock and the rollout
commands, each with who (``user@host`` by default), why and when, per Marquee and for the fleet
(``--all`` and rollouts), for ``playguard why``.

Each scope's entries are one Redis list (``keys.operator_actions_key``), newest first, cut to
``KEPT_ACTIONS`` by the same transaction that adds one: bounded in entries, and each entry in
bytes (``who`` and ``reason`` cut before they are stored), so a hostile reason costs at most
``ENTRY_MAX`` bytes. They live in Redis only: with PostgreSQL the daemon's role cannot append to
``playguard.changes`` (the triggers write it), and a flushed Redis loses them with the pauses and
pins they describe. An entry read back is outside input: one not of the written shape is left
out, never an error.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.foreign import is_wrong_type
from playguard_async.coordination.keys import operator_actions_key
from playguard_async.kits.aio import bounded

FLEET = "*"
"""The scope of what was done fleet-wide: a pause of the whole fleet, a rollout command."""

KEPT_ACTIONS = 200
"""Entries each scope keeps; the oldest go first."""

WHO_MAX = 200
REASON_MAX = 500
TARGET_MAX = 300
"""Characters kept of who, of the reason and of what was acted on (a Playground, a rollout's
scope, a duration); with the fixed fields, an entry is at most ``ENTRY_MAX`` bytes."""

ENTRY_MAX = 12 * (WHO_MAX + REASON_MAX + 2 * TARGET_MAX) + 200
"""Bytes of one stored entry at most: each character of the four texts (the action is cut to
``TARGET_MAX`` too) is at most 12 bytes as JSON writes it (``\\uXXXX`` twice for one beyond
the basic plane), and the time and keys take under 200."""


def acting_user() -> str:
    """This process's user: the name the OS gives its real uid (``pwd``), else ``uid <n>`` (a
    container's user with no entry). Never the environment (``USER=``, ``LOGNAME=``): whoever
    runs ``playguard`` sets those."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def operator_identity(user: str | None = None) -> str:
    """``user`` (default: this process's; the web view passes its signed-in user) at this host:
    who did an action, as every kept event names it."""
    return f"{user or acting_user()}@{socket.gethostname()}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class OperatorAction:
    """One thing an operator did: ``action`` (``pause``, ``pin``, ``rollout abort``...) to
    ``scope`` (a Marquee, or ``FLEET``), on ``target`` when narrower (a Playground, a rollout's
    scope), by ``by``, for ``reason``, at ``at`` (Unix seconds, wall clock: for display)."""

    at: float
    scope: str
    action: str
    by: str
    reason: str = ""
    target: str = ""

    def encode(self) -> str:
        return json.dumps({
            "at": self.at, "action": _cut(self.action, TARGET_MAX), "by": _cut(self.by, WHO_MAX),
            "reason": _cut(self.reason, REASON_MAX), "target": _cut(self.target, TARGET_MAX),
        })  # fmt: skip

    @classmethod
    def parse(cls, scope: str, raw: bytes | str) -> OperatorAction | None:
        """The entry ``raw`` holds, its texts cut again (another writer's may be longer); None
        for one not of the written shape."""
        try:
            fields: Any = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(fields, Mapping):
            return None
        at = fields.get("at")
        action, by = fields.get("action"), fields.get("by")
        reason, target = fields.get("reason"), fields.get("target")
        if not isinstance(at, int | float) or isinstance(at, bool) or not 0 <= at < 1e12:
            return None
        if not (isinstance(action, str) and isinstance(by, str) and isinstance(reason, str)
                and isinstance(target, str)):  # fmt: skip
            return None
        return cls(float(at), scope, _cut(action, TARGET_MAX), _cut(by, WHO_MAX),
                   _cut(reason, REASON_MAX), _cut(target, TARGET_MAX))  # fmt: skip


async def record_operator_action(
    redis: RedisClient,
    scope: str,
    action: str,
    *,
    reason: str = "",
    target: str = "",
    by: str | None = None,
    at: float | None = None,
    timeout: float,
) -> OperatorAction:
    """Keep ``action`` to ``scope`` as an event, by ``by`` (default: this process's
    ``user@host``; the web view passes its signed-in user), at ``at`` (default now; a stored
    pause's or pin's own time, so ``why`` shows the action and what is in force as one): the one
    way every operator action, from the CLI or the web, is recorded. The list is cut to
    ``KEPT_ACTIONS`` in the same transaction."""
    done = OperatorAction(
        time.time() if at is None else at, scope, action, by or operator_identity(), reason, target
    )
    key = operator_actions_key(scope)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.lpush(key, done.encode())
        pipe.ltrim(key, 0, KEPT_ACTIONS - 1)
        await bounded(timeout, pipe.execute())
    return done


async def operator_actions(redis: RedisClient, scope: str, timeout: float) -> list[OperatorAction]:
    """The actions kept for ``scope``, oldest first (a key of another type reads as none)."""
    try:
        raw = await bounded(timeout, redis.lrange(operator_actions_key(scope), 0, KEPT_ACTIONS - 1))
    except ResponseError as exc:
        if not is_wrong_type(exc):
            raise
        return []
    found = (OperatorAction.parse(scope, entry) for entry in reversed(raw))
    return [action for action in found if action is not None]
