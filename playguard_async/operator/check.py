"""``playguard check``: settings, inventory, Redis, then each Marquee and registry as a cycle
would reach it; nothing is changed."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from playguard_async.coordination.address import parse_redis_url
from playguard_async.coordination.keys import fence_key, marquee_lock_name
from playguard_async.coordination.topology import read_topology
from playguard_async.desired_state.model import Inventory, InventoryError, Marquee, Registry
from playguard_async.kits.aio import bounded
from playguard_async.kits.vocabulary import fence_words
from playguard_async.operator.fleet import Fleet, RedisUnavailable, open_fleet, redis_errors
from playguard_async.phases.protocol import UnknownPhase, resolve_phases
from playguard_async.remote import guard
from playguard_async.remote.docker import registry_auth
from playguard_async.remote.errors import AuthRefused, HostKeyMismatch, RemoteError
from playguard_async.remote.registry import check_login
from playguard_async.remote.ssh import RemoteOptions, open_session
from playguard_async.service.wiring import remote_options
from playguard_async.settings import Settings, SettingsError, load_named_settings


@dataclass(frozen=True)
class CheckRow:
    """One verdict of ``check``: what was checked, whether it is fine, and what was seen or why
    not."""

    subject: str
    ok: bool
    detail: str


async def run_checks(config: Path | None, *, timeout: float) -> list[CheckRow]:
    """Settings, inventory, Redis, then each Marquee as a cycle would reach it: SSH host key and
    login, the Docker API through the tunnel, compose on the host. Marquees are checked at once,
    ``max_concurrent_cycles`` at a time, each within ``timeout`` seconds; nothing is changed.
    """
    try:
        settings = load_named_settings(config)
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
    note = "; " + fence_words(
        int(counter) if counter.isdigit() else None, row.host_fence,
        host_unknown="it accepted no fenced write yet",
    )  # fmt: skip
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
