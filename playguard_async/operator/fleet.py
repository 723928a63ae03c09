"""What the operator's commands find out and do, as data; ``cli.py`` only parses and prints.

Everything here goes through what the daemon itself uses: the same Redis client, the same lock
records and fences, the same cycle records, the same SSH session. ``run_cycle`` is the daemon's own
engine under the Marquee's lock; ``unlock`` deletes with the lock's compare-and-delete script, so it
never removes a record it did not show. A failure a person can fix (an unknown Marquee, Redis out of
reach) is raised as an ``OperateError`` whose message is one readable line.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from playguard_async.coordination.address import parse_redis_url
from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.keys import fence_key, lock_key, marquee_lock_name
from playguard_async.coordination.lock import ReleaseResult, TokenLock
from playguard_async.coordination.lock_state import LockState, inspect_lock
from playguard_async.coordination.marquee_reads import MarqueeStatus, read_status
from playguard_async.coordination.pause import FLEET, Pause, lift_pause, take_pause
from playguard_async.coordination.records import CycleRecords
from playguard_async.coordination.topology import read_topology
from playguard_async.desired_state.model import Inventory, InventoryError, Marquee, Registry
from playguard_async.engine.results import CycleResult, Outcome, PhaseListener
from playguard_async.kits.aio import bounded
from playguard_async.phases.protocol import UnknownPhase, resolve_phases
from playguard_async.remote import guard
from playguard_async.remote.docker import registry_auth
from playguard_async.remote.errors import AuthRefused, HostKeyMismatch, RemoteError
from playguard_async.remote.registry import check_login
from playguard_async.remote.ssh import RemoteOptions, open_session
from playguard_async.service.wiring import (
    build_engine,
    close_engine,
    inventory_source,
    redis_for,
    remote_options,
    stopping_on_signals,
)
from playguard_async.settings import Settings, SettingsError, load_settings

_LOCK_PREFIX, _LOCK_SUFFIX = lock_key("*").split("*")


class OperateError(Exception):
    """The command cannot do what was asked; the message says why in one line."""


class RedisUnavailable(OperateError):
    """Redis did not answer, or answered with an error; nothing was read or changed there."""

    def __init__(self, settings: Settings, reason: str) -> None:
        super().__init__(f"Redis at {settings.redis_url_for_display()} unavailable: {reason}")


# -- plumbing shared by every command ----------------------------------------------------------


@contextlib.contextmanager
def redis_errors(settings: Settings) -> Iterator[None]:
    """Turn any Redis failure or timeout inside the block into one readable ``RedisUnavailable``."""
    try:
        yield
    except (RedisError, TimeoutError) as exc:
        reason = str(exc) or f"no answer within {settings.redis_socket_timeout:g} s"
        raise RedisUnavailable(settings, reason) from exc


@dataclass(frozen=True)
class Fleet:
    """What every command works with: the settings, a Redis client made as the daemon makes it,
    and the inventory the settings name (read on demand: ``locks`` and ``unlock`` need none)."""

    settings: Settings
    redis: RedisClient

    async def inventory(self) -> Inventory:
        return await inventory_source(self.settings).load()


@asynccontextmanager
async def open_fleet(settings: Settings) -> AsyncIterator[Fleet]:
    """The fleet of ``settings``; Redis failures inside become ``RedisUnavailable``; the client is
    closed on the way out."""
    redis = redis_for(settings)
    try:
        with redis_errors(settings):
            yield Fleet(settings, redis)
    finally:
        await redis.aclose()


# -- status ------------------------------------------------------------------------------------


async def fleet_status(settings: Settings) -> list[MarqueeStatus]:
    """Every Marquee of the inventory, in inventory order: its lock now and its last cycle."""
    async with open_fleet(settings) as fleet:
        inventory = await fleet.inventory()
        records = CycleRecords(
            fleet.redis,
            history_length=settings.history_length,
            timeout=settings.redis_socket_timeout,
        )

        return list(
            await asyncio.gather(
                *(
                    read_status(
                        records, marquee.name, launchable=marquee.launchable, mode=marquee.mode
                    )
                    for marquee in inventory.marquees
                )
            )
        )


# -- locks and unlock --------------------------------------------------------------------------


async def held_locks(settings: Settings) -> list[LockState]:
    """Every lock held now (Marquees' and any other name's), by name; one SCAN, then each read."""
    async with open_fleet(settings) as fleet:
        names = sorted(
            {
                key.decode().removeprefix(_LOCK_PREFIX).removesuffix(_LOCK_SUFFIX)
                async for key in fleet.redis.scan_iter(match=lock_key("*"), count=1000)
            }
        )
        states = await asyncio.gather(
            *(
                inspect_lock(fleet.redis, name, timeout=settings.redis_socket_timeout)
                for name in names
            )
        )
    # A lock released between the SCAN and its read is simply no longer held.
    return [state for state in states if state is not None]


@dataclass(frozen=True)
class Unlock:
    """What ``unlock`` found and did. ``found`` is None when the Marquee was not locked; ``result``
    is None when nothing was attempted (not locked, or not forced)."""

    key: str
    fence_key: str
    found: LockState | None
    result: ReleaseResult | None


async def unlock(settings: Settings, marquee: str, *, force: bool) -> Unlock:
    """Read the Marquee's lock; with ``force``, delete exactly the record read, never another one
    (compare-and-delete), and never the fence counter, so fences keep growing after it.

    A name the inventory does not hold is an ``OperateError`` (a typo would otherwise read as
    "not locked, nothing to delete" and exit 0)."""
    async with open_fleet(settings) as fleet:
        _known(await fleet.inventory(), marquee, inventory_source(settings).describe())
        lock = TokenLock(
            fleet.redis, marquee_lock_name(marquee), timeout=settings.redis_socket_timeout
        )
        found = await inspect_lock(fleet.redis, lock.name, timeout=lock.timeout)
        result = None
        # A key of another type has no record to compare: it is left for a person to delete.
        if found is not None and force and found.foreign is None:
            # Exactly the record read: one that differs (another holder since) is left alone.
            result = await lock.compare_and_delete(found.record)
            if result is ReleaseResult.UNKNOWN:
                raise RedisUnavailable(settings, "no answer to the delete; run `playguard locks`")
    return Unlock(lock.key, lock.fence_key, found, result)


# -- one cycle in the foreground ---------------------------------------------------------------


@dataclass(frozen=True)
class CycleRun:
    """A foreground cycle's result; when it found the Marquee locked, ``holder`` is who held it
    right after (None if they released it in between)."""

    result: CycleResult
    holder: LockState | None = None


async def run_cycle(settings: Settings, marquee: str, on_phase: PhaseListener) -> CycleRun:
    """One cycle of ``marquee`` now, by the daemon's own engine: same lock, same phases, recorded
    in Redis like the daemon's, ``on_phase`` told as each phase ends.

    As in the daemon, a first SIGINT or SIGTERM lets the running phase finish and starts no other
    (outcome ``interrupted``); a second one cancels the phase (``engine.CycleCancelled``).
    """
    engine = build_engine(settings, phase_listeners=[on_phase])
    try:
        with redis_errors(settings):
            inventory = await engine.load_inventory()
            target = _launchable(inventory, marquee, engine.desired_state.describe())
            with stopping_on_signals(engine):
                result = await engine.run_one(target, inventory)
            if result.outcome is Outcome.REDIS_UNAVAILABLE:
                # The result keeps only the error's repr, which says little in redis-py 8; asking
                # again raises the error itself, whose message names address and cause.
                await bounded(settings.redis_socket_timeout, engine.redis.ping())
                raise RedisUnavailable(settings, result.reason or "no answer")
            if result.outcome is not Outcome.LOCKED:
                return CycleRun(result)
            name = marquee_lock_name(marquee)
            return CycleRun(
                result,
                await inspect_lock(engine.redis, name, timeout=settings.redis_socket_timeout),
            )
    finally:
        await close_engine(engine)


def _known(inventory: Inventory, name: str, source: str) -> Marquee:
    try:
        return inventory.marquee(name)
    except KeyError:
        known = ", ".join(m.name for m in inventory.marquees) or "none"
        raise OperateError(f"{source}: no marquee named {name!r} (known: {known})") from None


def _launchable(inventory: Inventory, name: str, source: str) -> Marquee:
    marquee = _known(inventory, name, source)
    if not marquee.launchable:
        raise OperateError(
            f"{source}: marquee {name!r} has launchable: false, so no cycle runs on it"
        )
    if not marquee.runs_cycles:
        raise OperateError(f"{source}: marquee {name!r} has mode: off, so no cycle runs on it")
    return marquee


# -- plan --------------------------------------------------------------------------------------


class PlanVerdict(enum.IntEnum):
    """A plan's verdict, as its exit status (Terraform's ``-detailed-exitcode``)."""

    IN_SYNC = 0
    ERROR = 1
    CHANGES = 2


def plan_verdict(result: CycleResult) -> PlanVerdict:
    """In sync (an ok detect cycle with nothing it would do), changes pending, or an error (any
    other outcome: locked, unreachable, paused, a failed phase...)."""
    if result.outcome is not Outcome.OK:
        return PlanVerdict.ERROR
    return PlanVerdict.CHANGES if any(result.actions.values()) else PlanVerdict.IN_SYNC


def plan_json(result: CycleResult) -> dict[str, Any]:
    """A plan for scripts: the verdict, what would change by phase, and the detect cycle."""
    return {
        "marquee": result.marquee,
        "verdict": plan_verdict(result).name.lower(),
        "changes": {phase: taken for phase, taken in result.actions.items() if taken},
        "outcome": result.outcome.value,
        "reason": result.reason,
        "cycle": result.to_record(),
    }


async def plan_one(settings: Settings, marquee: str) -> CycleRun:
    """A detect cycle of ``marquee`` under its lock (``run_cycle`` as a dry run)."""
    return await run_cycle(_planning(settings), marquee, lambda result, phase: None)


async def plan_fleet(settings: Settings) -> list[CycleResult]:
    """A detect cycle of every Marquee that runs cycles, as ``run_cycle`` runs one, in
    inventory order; at most ``max_concurrent_cycles`` at once (the engine's slots)."""
    engine = build_engine(_planning(settings))
    try:
        with redis_errors(settings):
            inventory = await engine.load_inventory()
            with stopping_on_signals(engine):
                return list(
                    await asyncio.gather(
                        *(engine.run_one(m, inventory) for m in inventory.cycled_marquees())
                    )
                )
    finally:
        await close_engine(engine)


def _planning(settings: Settings) -> Settings:
    """``settings`` for a plan: every cycle a dry run, whatever the Marquee's mode."""
    return settings.model_copy(update={"dry_run": True})


# -- pause and resume --------------------------------------------------------------------------


async def pause(settings: Settings, scope: str, reason: str, seconds: float | None) -> Pause:
    """Pause ``scope`` (a Marquee of the inventory, or ``FLEET``) for ``seconds`` (default
    ``pause_default_for``); the pause stored. Nothing is stored for an unknown Marquee."""
    async with open_fleet(settings) as fleet:
        if scope != FLEET:
            _known(await fleet.inventory(), scope, inventory_source(settings).describe())
        taken = Pause.taken_now(scope, reason, seconds or settings.pause_default_for)
        await take_pause(fleet.redis, taken, settings.redis_socket_timeout)
    return taken


async def resume(settings: Settings, scope: str) -> Pause | None:
    """Lift the pause of ``scope``; the pause lifted, None when there was none. A Marquee paused
    by the fleet-wide pause stays paused until that one is lifted (``resume --all``)."""
    async with open_fleet(settings) as fleet:
        if scope != FLEET:
            _known(await fleet.inventory(), scope, inventory_source(settings).describe())
        return await lift_pause(fleet.redis, scope, settings.redis_socket_timeout)


# -- check -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckRow:
    """One verdict of ``check``: what was checked, whether it is fine, and what was seen or why
    not."""

    subject: str
    ok: bool
    detail: str


async def check(config: Path | None, *, timeout: float) -> list[CheckRow]:
    """Settings, inventory, Redis, then each Marquee as a cycle would reach it: SSH host key and
    login, the Docker API through the tunnel, compose on the host. Marquees are checked at once,
    ``max_concurrent_cycles`` at a time, each within ``timeout`` seconds; nothing is changed.
    """
    try:
        settings = load_settings(config)
        phases = resolve_phases(settings.phases)
    except (SettingsError, UnknownPhase) as exc:
        return [CheckRow("settings", False, str(exc))]
    source = str(config) if config is not None else "defaults and PLAYGUARD_* environment"
    rows = [CheckRow("settings", True, f"{source}: {len(phases)} phases")]
    async with open_fleet(settings) as fleet:
        redis_row = asyncio.create_task(_check_redis(fleet))
        topology_row = asyncio.create_task(_check_topology(fleet))
        try:
            inventory = await fleet.inventory()
        except InventoryError as exc:
            return [
                *rows,
                CheckRow("inventory", False, exc.summary()),
                await redis_row,
                await topology_row,
            ]
        rows += [CheckRow("inventory", True, _inventory_summary(settings, inventory))]
        options = dataclasses.replace(
            remote_options(settings), command_timeout=timeout, docker_timeout=timeout
        )
        slots = asyncio.Semaphore(settings.cycle_slots())

        async def bounded_check(marquee: Marquee) -> CheckRow:
            async with slots:
                return await _check_marquee(marquee, options, timeout)

        async def bounded_registry_check(registry: Registry) -> CheckRow:
            async with slots:
                return await _check_registry(registry, inventory, options, timeout)

        marquee_rows, registry_rows = await asyncio.gather(
            asyncio.gather(*map(bounded_check, inventory.marquees)),
            asyncio.gather(*map(bounded_registry_check, inventory.registries)),
        )
        marquee_rows = [
            await _compare_fences(fleet, marquee, row)
            for marquee, row in zip(inventory.marquees, marquee_rows, strict=True)
        ]
        return [*rows, await redis_row, await topology_row, *marquee_rows, *registry_rows]


def _inventory_summary(settings: Settings, inventory: Inventory) -> str:
    launchable = len(inventory.launchable_marquees())
    return (
        f"{settings.inventory}: {len(inventory.marquees)} marquees ({launchable} launchable), "
        f"{len(inventory.playgrounds)} playgrounds, {len(inventory.agent_chats)} agent chats"
    )


async def _check_redis(fleet: Fleet) -> CheckRow:
    settings = fleet.settings
    try:
        with redis_errors(settings):
            info = await bounded(settings.redis_socket_timeout, fleet.redis.info("server"))
            # Timed on the connection the INFO opened: the round trip, not the connect.
            started = time.monotonic()
            await bounded(settings.redis_socket_timeout, fleet.redis.ping())
            latency = (time.monotonic() - started) * 1000
    except RedisUnavailable as exc:
        return CheckRow("redis", False, str(exc))
    detail = f"{settings.redis_url_for_display()}: Redis {info['redis_version']}, {latency:.1f} ms"
    return CheckRow("redis", True, detail)


async def _check_topology(fleet: Fleet) -> CheckRow:
    """Mode, primaries, replicas and their lag, cluster slots; fails when the lock cannot work
    as configured (unserved slots, fewer replicas in sync than ``lock_min_replicas``)."""
    settings = fleet.settings
    try:
        with redis_errors(settings):
            topology = await read_topology(
                fleet.redis, parse_redis_url(settings.redis_url), settings.redis_socket_timeout
            )
    except RedisUnavailable as exc:
        return CheckRow("redis topology", False, str(exc))
    problems = topology.problems(settings.lock_min_replicas)
    detail = topology.describe() + "".join(f"; {problem}" for problem in problems)
    return CheckRow("redis topology", not problems, detail)


@dataclass(frozen=True)
class MarqueeCheck(CheckRow):
    host_fence: int | None = None
    """The highest fence the host accepted (None: none yet, or not read)."""


async def _compare_fences(fleet: Fleet, marquee: Marquee, row: CheckRow) -> CheckRow:
    """The host's fence beside Redis's counter: a host ahead of Redis refuses every lease until
    a cycle lifts the counter (after a FLUSHALL, a new Redis or a failover)."""
    if not isinstance(row, MarqueeCheck) or not row.ok:
        return row
    try:
        raw = await bounded(
            fleet.settings.redis_socket_timeout,
            fleet.redis.get(fence_key(marquee_lock_name(marquee.name))),
        )
    except Exception:  # the Redis row says why; the Marquee's own verdict stands
        return row
    counter = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or 0)
    host = "none yet" if row.host_fence is None else str(row.host_fence)
    note = f"; fence: host {host}, Redis {counter}"
    if row.host_fence is not None and counter.isdigit() and row.host_fence > int(counter):
        note += " (Redis is behind the host: the next cycle there is refused and lifts it)"
    return dataclasses.replace(row, detail=row.detail + note)


async def _check_marquee(marquee: Marquee, options: RemoteOptions, timeout: float) -> CheckRow:
    """Open the session a cycle would open, in dry-run so that no write is possible, and ask the
    Docker API and compose for their versions through it; check the host has what fenced writes
    need, and read the highest fence it accepted."""
    subject = f"marquee {marquee.name}"
    step = "ssh"
    try:
        async with (
            asyncio.timeout(timeout),
            open_session(marquee, options, dry_run=True) as session,
        ):
            host_key = session.connection.get_server_host_key()
            fingerprint = host_key.get_fingerprint("sha256") if host_key else "?"
            step = "docker"
            version = await session.api(session.docker.version())
            step = "compose"
            compose = await session.run([*options.compose_command, "version"])
            step = "host tools"
            missing = (await session.run(["sh", "-c", _MISSING_TOOLS, "sh", *_HOST_TOOLS])).stdout
            if missing.split():
                return CheckRow(subject, False, f"host tools: missing {', '.join(missing.split())}")
            step = "fence"
            recorded = (await session.run(guard.read_fence(marquee))).stdout.split()
    except HostKeyMismatch as exc:
        return CheckRow(subject, False, f"host key: {exc}")
    except AuthRefused as exc:
        return CheckRow(subject, False, f"login: {exc}")
    except RemoteError as exc:
        return CheckRow(subject, False, f"{step}: {exc}")
    except TimeoutError:
        return CheckRow(subject, False, f"{step}: no answer within {timeout:g} s")
    compose_version = (compose.stdout.strip().splitlines() or ["(no output)"])[0]
    if recorded and not recorded[0].isdigit():
        return CheckRow(
            subject, False, f"fence: the host's fence file is corrupt ({recorded[0]!r})"
        )
    return MarqueeCheck(
        subject,
        True,
        f"{marquee.user}@{marquee.host}:{marquee.port}: host key {fingerprint}; "
        f"Docker {version['Version']} (API {version['ApiVersion']}); {compose_version}",
        host_fence=int(recorded[0]) if recorded else None,
    )


async def _check_registry(
    registry: Registry, inventory: Inventory, options: RemoteOptions, timeout: float
) -> CheckRow:
    """The password source present and readable here, then a login (``POST /auth``, which stores
    nothing) from the first launchable Marquee whose playgrounds pull from the registry: the
    login a cycle makes, from where it makes it."""
    subject = f"registry {registry.name}"
    try:
        auth = registry_auth(registry)
    except InventoryError as exc:
        return CheckRow(subject, False, str(exc))
    via = next(
        (
            marquee
            for marquee in inventory.launchable_marquees()
            if registry in inventory.registries_on(marquee.name)
        ),
        None,
    )
    if via is None:
        return CheckRow(subject, True, f"{registry.server}: password readable; no Marquee uses it")
    try:
        async with (
            asyncio.timeout(timeout),
            open_session(via, options, dry_run=True) as session,
        ):
            await check_login(session, auth)
    except RemoteError as exc:
        return CheckRow(subject, False, f"login to {registry.server} from {via.name}: {exc}")
    except TimeoutError:
        return CheckRow(
            subject,
            False,
            f"login to {registry.server} from {via.name}: no answer in {timeout:g} s",
        )
    return CheckRow(
        subject, True, f"{registry.server}: {registry.username} logged in from {via.name}"
    )


# What fenced writes run on a host besides compose: the docker client, flock and GNU timeout.
_HOST_TOOLS = ("docker", "flock", "timeout")
_MISSING_TOOLS = 'for tool in "$@"; do command -v "$tool" >/dev/null 2>&1 || echo "$tool"; done'
