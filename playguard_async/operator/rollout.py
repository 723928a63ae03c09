"""``rollout list|show|promote|pause|resume|abort``: the fleet's rollouts as Redis holds them,
and an operator's say in them (``phases.rollout_record``). Each action is one compare-and-set
over the record read, with who (user@host) and why kept in its events; a cycle that changed the
record meanwhile makes it read again (three tries). The commands reach Redis only; the CLI's and
the web view's actions then put the stored record on the hosts (``operator.rollout_hosts``)."""

from __future__ import annotations

from datetime import UTC, datetime

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.operator_actions import (
    FLEET,
    operator_identity,
    record_operator_action,
)
from playguard_async.coordination.replicas import live_versions
from playguard_async.coordination.rollouts import FOREIGN, read_rollout, write_rollout
from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.rollout_policy import admission_key
from playguard_async.operator.fleet import Fleet, OperateError, known_marquee, open_fleet
from playguard_async.phases.rollout_desk import scope_of
from playguard_async.phases.rollout_reads import recorded_rollouts, unfinished_rollouts
from playguard_async.phases.rollout_record import Rollout, RolloutRefused
from playguard_async.settings import Settings

ACTIONS = ("promote", "pause", "resume", "abort")

REASON_MAX = 500
"""Characters of an operator's reason for an action at most."""

TRIES = 3
"""Reads and compare-and-sets an action makes before it gives up on a busy record."""


async def rollouts(settings: Settings) -> list[tuple[str, Rollout | None]]:
    """Every scope that had a rollout, with its record (None: none readable)."""
    async with open_fleet(settings) as fleet:
        return await recorded_rollouts(fleet.redis, settings.redis_socket_timeout)


async def unfinished(settings: Settings) -> list[Rollout]:
    """The rollouts not done yet (running, paused, halted, aborted), for ``status``."""
    async with open_fleet(settings) as fleet:
        return await unfinished_rollouts(fleet.redis, settings.redis_socket_timeout)


async def replicas(settings: Settings) -> list[tuple[str, str]]:
    """The live replicas and the version each runs, for ``status``."""
    async with open_fleet(settings) as fleet:
        return await live_versions(fleet.redis, settings.redis_socket_timeout)


async def of_marquee(settings: Settings, marquee: str) -> list[tuple[Rollout, int]]:
    """The rollouts of ``marquee``'s Playgrounds' scopes that Redis holds, each with the wave
    (0-based) the Marquee is in, for ``describe``."""
    async with open_fleet(settings) as fleet:
        inventory = await fleet.inventory()
        return await rollouts_of(fleet.redis, inventory, marquee, settings.redis_socket_timeout)


async def rollouts_of(
    redis: RedisClient, inventory: Inventory, marquee: str, timeout: float
) -> list[tuple[Rollout, int]]:
    """``of_marquee`` on a Redis client and an inventory already at hand (``why``)."""
    found: list[tuple[Rollout, int]] = []
    target = known_marquee(inventory, marquee, "the desired state")
    for scope in sorted({scope_of(pg) for pg in inventory.playgrounds_on(marquee)}):
        read = await read_rollout(redis, scope, timeout)
        record = None if read.raw in (None, FOREIGN) else Rollout.parse(scope, read.expected)
        if record is not None:
            key = admission_key(scope, marquee, canary=target.canary)
            found.append((record, record.wave_of(key)))
    return found


def as_json(rollout: Rollout) -> dict[str, object]:
    """A rollout for ``status --json`` and ``describe --json``: its summary's fields."""
    return {
        "scope": rollout.scope, "status": rollout.status, "wave": rollout.wave + 1,
        "waves": len(rollout.waves), "release": rollout.target, "commit": rollout.commit,
        "failed": rollout.failed_count, "why": rollout.why, "id": rollout.id,
    }  # fmt: skip


async def show(settings: Settings, scope: str) -> tuple[Rollout, dict[int, int]]:
    async with open_fleet(settings) as fleet:
        read = await read_rollout(fleet.redis, scope, settings.redis_socket_timeout)
    rollout = _readable(scope, read.raw)
    return rollout, read.healthy


async def act(
    settings: Settings,
    scope: str,
    rollout_id: str,
    action: str,
    why: str,
    *,
    user: str | None = None,
) -> Rollout:
    """``action`` applied to rollout ``rollout_id`` (the id ``show`` prints) of ``scope`` by
    ``user`` (default: this process's), stored; ``OperateError`` when the scope has none, its
    rollout is another one now (a release opened since the operator looked: the action was
    meant for the one named), or its status does not allow it."""
    async with open_fleet(settings) as fleet:
        return await store_action(fleet, scope, rollout_id, action, why, user=user)


async def store_action(
    fleet: Fleet, scope: str, rollout_id: str, action: str, why: str, *, user: str | None
) -> Rollout:
    """``act`` on a fleet already open (``rollout_hosts.act_on_hosts``)."""
    timeout = fleet.settings.redis_socket_timeout
    who = operator_identity(user)
    for _ in range(TRIES):
        read = await read_rollout(fleet.redis, scope, timeout)
        current = _readable(scope, read.raw)
        if current.id != rollout_id:
            raise OperateError(
                f"rollout {rollout_id[:40]!r} is no longer the rollout of {scope}: it is "
                f"{current.id} now (release {current.target[:12]}, {current.status}); "
                f"see: playguard rollout show {scope}"
            )
        try:
            changed = current.by_operator(action, who, why, read.now).stored_over(current)
        except RolloutRefused as exc:
            raise OperateError(str(exc)) from None
        if await write_rollout(fleet.redis, read, changed.encode(), opens=False,
                               timeout=timeout):  # fmt: skip
            await record_operator_action(
                fleet.redis, FLEET, f"rollout {action}", reason=why, target=scope, by=who,
                at=read.now, timeout=timeout,
            )  # fmt: skip
            return changed
    raise OperateError(f"rollout {scope}: changed by cycles {TRIES} times meanwhile; try again")


def _readable(scope: str, raw: str | None) -> Rollout:
    if raw is None:
        raise OperateError(unknown_rollout(scope))
    rollout = None if raw == FOREIGN else Rollout.parse(scope, raw)
    if rollout is None:
        raise OperateError(f"rollout {scope!r}: its record in Redis is not readable")
    return rollout


def unknown_rollout(scope: str) -> str:
    """Why a rollout was not found, naming the form a rollout's name has when ``scope`` lacks
    it (a Playspec's name alone, ``web``, matched nothing and said nothing of why)."""
    form = "" if "@" in scope else f": a rollout is named PLAYSPEC@BRANCH, as {scope}@main"
    return f"no rollout {scope!r}{form} (see: playguard rollout list)"


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def summary(rollout: Rollout) -> str:
    """One line: scope, status, wave, release, failures, and why it stopped."""
    commit = "-" if rollout.commit is None else rollout.commit[:12]
    why = f": {rollout.why}" if rollout.status in ("halted", "paused", "aborted") else ""
    return (
        f"{rollout.scope}: {rollout.status}, wave {rollout.wave + 1} of {len(rollout.waves)}, "
        f"release {rollout.target[:12]} (commit {commit}), {rollout.failed_count} failed{why} "
        f"[rollout {rollout.id}]"
    )


def schedule(rollout: Rollout, healthy: dict[int, int]) -> list[str]:
    """``show``'s lines: the summary, each wave with its size and progress, why it stopped, the
    failed Marquees and the last events."""
    lines = [
        summary(rollout),
        f"  opened {_when(rollout.opened)}; policy {rollout.policy.encode()}",
    ]
    if rollout.why:
        lines.append(f"  why: {rollout.why}")
    for index, wave in enumerate(rollout.waves):
        state = "done" if index < rollout.wave or rollout.status == "done" else (
            "current" if index == rollout.wave else "waiting"
        )  # fmt: skip
        lines.append(f"  wave {index + 1}: {wave.size} marquee(s), "
                     f"{healthy.get(index, 0)} verified healthy ({state})")  # fmt: skip
    lines += [f"  failed: {f.marquee} (wave {f.wave + 1}): {f.why}" for f in rollout.failures]
    lines += [
        f"  {_when(event.at)} {event.what} by {event.by}: {event.why}" for event in rollout.events
    ]
    return lines
