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
from playguard_async.coordination.lock import LockState, ReleaseResult, TokenLock, inspect_lock
from playguard_async.coordination.pause import FLEET, Pause, lift_pause, paused, take_pause
from playguard_async.coordination.records import CycleRecords
from playguard_async.coordination.topology import read_topology
from playguard_async.cycle_record import (
    NoticeKind,
    StoredRecord,
    notices_of,
    optional,
    seconds,
    typed,
)
from playguard_async.desired_state.inventory import Inventory, InventoryError, Marquee, Registry
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


def holder_json(state: LockState) -> dict[str, Any]:
    """A held lock for scripts; the token stays out, as nothing outside the lock needs it. A key
    holding something else has ``known`` false, null holder fields and its value in ``record``."""
    holder = state.holder
    return {
        "name": state.name,
        "known": holder is not None,
        "replica": holder and holder.replica,
        "host": holder and holder.host,
        "pid": holder and holder.pid,
        "acquired_at": holder and holder.acquired_at,
        "fence": state.fence,
        "ttl_left": state.ttl_left,
        "record": None if holder else shown_record(state.record),
    }


def shown_record(raw: bytes) -> str:
    """A lock value this project did not write, bounded, with anything unprintable escaped."""
    text = raw[:RECORD_SHOWN].decode("utf-8", "backslashreplace")
    text = text.encode("unicode_escape").decode("ascii")
    return repr(text) + (f" (+{len(raw) - RECORD_SHOWN} bytes)" if len(raw) > RECORD_SHOWN else "")


RECORD_SHOWN = 120
"""Bytes of an unknown lock value shown to an operator."""


# -- status ------------------------------------------------------------------------------------


def _by_subject(
    notices: list[tuple[str, NoticeKind, str, str]], *kinds: NoticeKind
) -> dict[str, list[str]]:
    """Subject -> the details of its notices of ``kinds``, in the order written."""
    found: dict[str, list[str]] = {}
    for _, kind, subject, detail in notices:
        if kind in kinds:
            found.setdefault(subject, []).append(detail)
    return found


@dataclass(frozen=True)
class LastCycle:
    """A Marquee's last recorded cycle, with what its findings ask an operator to look at:
    ``drift`` (playground -> why it was or would be changed), ``branch_gone`` (playground ->
    branch) and ``failed`` ("phase: item" for each registry, image or chat that failed)."""

    cycle: str
    outcome: str
    phase: str | None
    reason: str | None
    fence: int | None
    host_fence: int | None
    """The highest fence the Marquee itself was seen to hold in that cycle (None: no write)."""
    finished_at: float | None
    duration: float | None
    actions: int
    drift: dict[str, list[str]]
    branch_gone: dict[str, str]
    failed: list[str]
    replica: str | None = None
    """The replica that ran it (records older than this field: None)."""
    dry_run: bool = False
    """A dry run changes nothing: an ``ok`` one with drift is not a converged Marquee."""
    waited: float | None = None
    """Seconds it waited for its start offset and a slot before taking the lock."""
    unhealthy: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """Playground -> what its health gate reported: unhealthy services, held-back inputs,
    ``rolled back to <digests> because <reason>``."""

    @classmethod
    def from_record(cls, record: StoredRecord) -> LastCycle:
        """The record as written by the engine; anything else (Redis is outside input: a field
        missing, of another type, a record of another program) reads as outcome ``unknown``."""
        try:
            return cls._parse(record)
        except (KeyError, TypeError, ValueError, AttributeError):
            return cls(
                cycle="?", outcome="unknown", phase=None, fence=None, host_fence=None,
                finished_at=None,
                duration=None, actions=0, drift={}, branch_gone={}, failed=[],
                reason="the cycle record is not one playguard wrote",
            )  # fmt: skip

    @classmethod
    def _parse(cls, record: StoredRecord) -> LastCycle:
        notices = list(notices_of(record))
        return cls(
            cycle=typed(record["cycle"], str),
            outcome=typed(record["outcome"], str),
            phase=optional(record.get("phase"), str),
            reason=optional(record.get("reason"), str),
            fence=optional(record.get("fence"), int),
            host_fence=optional(record.get("host_fence"), int),
            finished_at=seconds(record["finished_at"]),
            duration=seconds(record["duration"]),
            actions=sum(len(taken) for taken in (record.get("actions") or {}).values()),
            replica=optional(record.get("replica"), str),
            dry_run=optional(record.get("dry_run"), bool) or False,
            waited=None if record.get("waited") is None else seconds(record["waited"]),
            drift=_by_subject(notices, NoticeKind.DRIFT),
            branch_gone={
                subject: detail
                for _, kind, subject, detail in notices
                if kind is NoticeKind.BRANCH_GONE
            },
            failed=[
                f"{phase}: {subject}"
                for phase, kind, subject, _ in notices
                if kind is NoticeKind.FAILED
            ],
            unhealthy=_by_subject(notices, NoticeKind.UNHEALTHY, NoticeKind.ROLLED_BACK),
        )

    def to_json(self, now: float) -> dict[str, Any]:
        age = None if self.finished_at is None else round(max(0.0, now - self.finished_at), 3)
        return {**dataclasses.asdict(self), "age": age}


@dataclass(frozen=True)
class MarqueeStatus:
    name: str
    launchable: bool
    lock: LockState | None
    last: LastCycle | None
    mode: str = "apply"
    pause: Pause | None = None
    """The pause that holds it back now (its own, else the fleet's), if any."""

    def to_json(self, now: float) -> dict[str, Any]:
        """Stable keys for scripts; ``age`` is seconds since the last cycle ended at ``now``."""
        return {
            "name": self.name,
            "launchable": self.launchable,
            "mode": self.mode,
            "paused": None if self.pause is None else self.pause.to_json(),
            "lock": None if self.lock is None else holder_json(self.lock),
            "last": None if self.last is None else self.last.to_json(now),
        }


async def fleet_status(settings: Settings) -> list[MarqueeStatus]:
    """Every Marquee of the inventory, in inventory order: its lock now and its last cycle."""
    async with open_fleet(settings) as fleet:
        inventory = await fleet.inventory()
        records = CycleRecords(
            fleet.redis,
            history_length=settings.history_length,
            timeout=settings.redis_socket_timeout,
        )

        async def status_of(marquee: Marquee) -> MarqueeStatus:
            lock, last, pause = await asyncio.gather(
                inspect_lock(
                    fleet.redis,
                    marquee_lock_name(marquee.name),
                    timeout=settings.redis_socket_timeout,
                ),
                records.last(marquee.name),
                paused(fleet.redis, marquee.name, settings.redis_socket_timeout),
            )
            return MarqueeStatus(
                name=marquee.name,
                launchable=marquee.launchable,
                lock=lock,
                last=None if last is None else LastCycle.from_record(last),
                mode=marquee.mode,
                pause=pause,
            )

        return list(await asyncio.gather(*map(status_of, inventory.marquees)))


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
        found = await lock.inspect()
        result = None
        if found is not None and force:
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
    engine = build_engine(settings)
    engine.phase_listeners.append(on_phase)
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
        await engine.redis.aclose()


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
        await engine.redis.aclose()


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
