"""The rollout gate: whether this Marquee may take a Playground's new release now, and what the
cycle tells the fleet's rollout afterwards.

A release is what the desired state asks of a Playground: its Playspec (as defined), the commit
at the head of its branch and the digest the registry serves for each of its images
(``release_of``). When a Playspec with a rollout policy (its own, else the fleet's) is on
several Marquees at a branch, the release goes to them in waves (``desired_state.rollout_policy``)
tracked by one record per scope, ``playspec@branch`` (``phases.rollout_record``, kept by
``coordination.rollouts``). A Playground whose last good revision is not the release opens a
rollout when the scope has none for it; one outside the admitted waves is held at its last good
revision (``phases.holds``), the way a ``last-good`` pin holds it: its checkout is not moved and
its services run their last good images by digest, so nothing on its host changes.

After the Playground converged, an admitted Marquee reports: verified healthy at the release
(counted once in its wave) or failed (named in the record, which halts the rollout past its
budget). Every cycle of a Marquee in the cohort also takes the rollout's steps that are due
(``Rollout.progressed``): a replica that dies mid-rollout leaves nothing half done, as each step
is one compare-and-set from a reading, and any other replica's next cycle takes the next one.

The verdicts are made once per cycle (sync_git asks first, reconcile_playgrounds reuses them);
a dry run (``plan``, ``detect``) reads and never writes. A Redis error leaves a Playground with a
last good revision held (uncertainty means no change), one with none unheld (nothing to hold
it at).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

import structlog
from redis.exceptions import RedisError

from playguard_async.coordination.rollouts import (
    FOREIGN,
    RolloutRead,
    mark_healthy,
    read_rollout,
    unmarked,
    write_rollout,
)
from playguard_async.desired_state.model import Inventory, Playground, Playspec
from playguard_async.desired_state.rollout_policy import RolloutPolicy, admission_key, waves_of
from playguard_async.phases.rollout_record import Rollout
from playguard_async.phases.toolkit import CycleContext, branch_heads
from playguard_async.remote.errors import DockerApiError
from playguard_async.remote.last_good import HealthRecord, read_records
from playguard_async.remote.registry import auth_for, registry_digest_once
from playguard_async.remote.ssh import RemoteSession

log = structlog.get_logger("playguard.rollouts")


def scope_of(playground: Playground) -> str:
    """The rollout scope of a Playground: its Playspec at its branch (``@`` is in neither)."""
    return f"{playground.playspec}@{playground.branch}"


def policy_of(ctx: CycleContext, playspec: Playspec) -> RolloutPolicy | None:
    return playspec.rollout or ctx.rollout_default


@dataclass(frozen=True)
class Verdict:
    """What the gate says of one Playground in this cycle: whether it may run ``release``
    (None: not known), the rollout it is part of, and, when held, why in words."""

    scope: str
    release: str | None
    rollout: Rollout | None
    admitted: bool
    key: str
    why: str = ""


async def release_of(
    session: RemoteSession, inventory: Inventory, playspec: Playspec, head: str
) -> str | None:
    """The release the desired state asks of a Playground of ``playspec`` whose branch is at
    ``head``; None when the registry does not say what an image's tag names now."""
    registry = inventory.registry_of(playspec)
    digests: dict[str, str] = {}
    try:
        for reference in sorted(set(playspec.images)):
            auth = auth_for(reference, registry)
            digests[reference] = await registry_digest_once(session, reference, auth)
    except DockerApiError as exc:
        log.info("rollout.release_unknown", playspec=playspec.name, reason=str(exc)[:200])
        return None
    definition = playspec.model_dump(mode="json", exclude={"rollout"})
    document = json.dumps([definition, head, digests], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(document.encode()).hexdigest()


async def verdicts(ctx: CycleContext, session: RemoteSession) -> dict[str, Verdict]:
    """Playground -> the gate's verdict, for this Marquee's running Playgrounds whose release a
    rollout stages (the others have none: they take their release at once). Made once per
    cycle."""

    async def decide() -> dict[str, Verdict]:
        return await _Gate(ctx, session).decide()

    return dict(await session.read_once(("rollout-verdicts",), decide, of_host=False))


class _Gate:
    """One cycle's verdicts: the readings of each scope, made once."""

    def __init__(self, ctx: CycleContext, session: RemoteSession) -> None:
        self.ctx, self.session = ctx, session
        self.lock = ctx.lease.lock
        self.reads: dict[str, RolloutRead] = {}

    async def decide(self) -> dict[str, Verdict]:
        ctx, session = self.ctx, self.session
        staged = [
            (playground, playspec, policy)
            for playground in ctx.inventory.playgrounds_on(ctx.marquee.name)
            if playground.state == "running"
            and (policy := policy_of(ctx, playspec := ctx.inventory.playspec_of(playground)))
            and policy.staged(len(ctx.inventory.cohort(playground.playspec, playground.branch)))
        ]
        if not staged:
            return {}
        heads = await branch_heads(session, (playspec.repo for _, playspec, _ in staged))
        records = await read_records(
            session, [pg.name for pg in ctx.inventory.playgrounds_on(ctx.marquee.name)]
        )
        verdicts: dict[str, Verdict] = {}
        for playground, playspec, policy in staged:
            head = heads[playspec.repo].get(playground.branch)
            if head is None:
                continue  # its branch is gone: sync_git and fetch_branches say so
            release = await release_of(session, ctx.inventory, playspec, head)
            verdicts[playground.name] = await self._verdict(
                playground, policy, release, head, records[playground.name]
            )
        return verdicts

    async def _verdict(
        self,
        playground: Playground,
        policy: RolloutPolicy,
        release: str | None,
        head: str,
        record: HealthRecord,
    ) -> Verdict:
        ctx = self.ctx
        scope = scope_of(playground)
        key = admission_key(scope, ctx.marquee.name, canary=ctx.marquee.canary)
        good = record.last_good
        try:
            read = await self._read(scope)
        except RedisError as exc:
            log.warning("rollout.unavailable", scope=scope, error=str(exc)[:200])
            return Verdict(scope, release, None, good is None, key, "rollout state unreadable")
        if release is None:
            return Verdict(scope, None, None, good is None, key, "release not known")
        rollout = _parsed(read)
        at_target = good is not None and good.release == release
        if rollout is None or rollout.target != release:
            if at_target or good is None or read.raw == FOREIGN:
                return Verdict(scope, release, rollout, True, key)
            rollout = await self._open(read, release, head, policy)
            if rollout is None:
                return Verdict(scope, release, None, False, key, "rollout opening raced")
        rollout = await self._take_steps(rollout)
        admitted = (
            rollout.admits(key, at_target=at_target)
            or good is None
            or (
                rollout.failed(ctx.marquee.name)
                and ctx.inventory.playspec_of(playground).rollback != "auto"
            )
        )
        return Verdict(scope, release, rollout, admitted, key, rollout.where(key))

    async def _read(self, scope: str) -> RolloutRead:
        if scope not in self.reads:
            self.reads[scope] = await read_rollout(self.lock.redis, scope, self.lock.timeout)
        return self.reads[scope]

    async def _open(
        self, read: RolloutRead, release: str, head: str, policy: RolloutPolicy
    ) -> Rollout | None:
        """A rollout of ``release`` to the scope's cohort, written over the record read; when
        another replica wrote first, the record it wrote (None if that is not this release's)."""
        playspec, _, branch = read.scope.partition("@")
        cohort = self.ctx.inventory.cohort(playspec, branch)
        keys = [admission_key(read.scope, m.name, canary=m.canary) for m in cohort]
        rollout = Rollout.open(
            read.scope, release, head, policy, waves_of(policy, keys), now=read.now
        )
        if self.session.dry_run:
            return rollout  # what plan shows: the rollout this cycle would open
        if await write_rollout(
            self.lock.redis, read, rollout.encode(), opens=True, timeout=self.lock.timeout
        ):
            log.info("rollout.opened", scope=read.scope, release=release[:12],
                     waves=[wave.size for wave in rollout.waves])  # fmt: skip
            self.reads[read.scope] = RolloutRead(read.scope, rollout.encode(), {}, read.now)
            return rollout
        fresh = await read_rollout(self.lock.redis, read.scope, self.lock.timeout)
        self.reads[read.scope] = fresh
        other = _parsed(fresh)
        return other if other is not None and other.target == release else None

    async def _take_steps(self, rollout: Rollout) -> Rollout:
        """The rollout after the steps due now: a wave completed, baked, timed out."""
        read = self.reads[rollout.scope]
        if rollout.timed_out(read.now):
            rollout = await self._time_out(rollout, read)
        return await advance(self.ctx, self.session, rollout, self.reads[rollout.scope])

    async def _time_out(self, rollout: Rollout, read: RolloutRead) -> Rollout:
        """The current wave's Marquees that never reported, counted as failed."""
        playspec, _, branch = rollout.scope.partition("@")
        members = [
            member.name
            for member in self.ctx.inventory.cohort(playspec, branch)
            if rollout.wave_of(admission_key(rollout.scope, member.name, canary=member.canary))
            == rollout.wave
        ]
        pending = await unmarked(self.lock.redis, rollout.scope, members, self.lock.timeout)
        changed = rollout
        for name in pending:
            changed = changed.with_failure(
                name, rollout.wave,
                f"not verified healthy within wave_timeout {rollout.policy.wave_timeout:g} s",
                read.now,
            ) or changed  # fmt: skip
        return await _stored(self.ctx, self.session, read, rollout, changed)


async def advance(
    ctx: CycleContext, session: RemoteSession, rollout: Rollout, read: RolloutRead
) -> Rollout:
    """``rollout`` after the steps due by ``read`` (counts and time), written if any is."""
    changed = rollout.progressed(read.healthy, read.now)
    if changed is None:
        return rollout
    while (step := changed.progressed(read.healthy, read.now)) is not None:
        changed = step  # a bake of 0 s: the wave completes and the next starts at once
    return await _stored(ctx, session, read, rollout, changed)


async def _stored(
    ctx: CycleContext, session: RemoteSession, read: RolloutRead, was: Rollout, now: Rollout
) -> Rollout:
    """``now`` written over ``was`` (as ``read``); what is stored when another replica wrote
    first (its step then is the one taken; this one is computed again by the next cycle)."""
    if now == was or session.dry_run:
        return now
    lock = ctx.lease.lock
    if await write_rollout(lock.redis, read, now.encode(), opens=False, timeout=lock.timeout):
        if now.events != was.events:
            log.info("rollout.step", scope=now.scope, event=now.events[-1].what,
                     why=now.events[-1].why, status=now.status)  # fmt: skip
        return now
    fresh = _parsed(await read_rollout(lock.redis, read.scope, lock.timeout))
    return fresh if fresh is not None and fresh.id == was.id else was


def _parsed(read: RolloutRead) -> Rollout | None:
    if read.raw is None:
        return None
    if read.raw == FOREIGN:
        log.warning("rollout.unreadable", scope=read.scope, value="a key of another type")
        return None
    return Rollout.parse(read.scope, read.raw)


async def tell_rollout(
    ctx: CycleContext, session: RemoteSession, verdict: Verdict, healthy: bool | None, why: str
) -> None:
    """Tell the rollout how the Playground it admitted came out: verified healthy at its target
    (``healthy`` True), failed (False, ``why``), or not known yet (None: nothing said)."""
    rollout = verdict.rollout
    if (
        rollout is None
        or healthy is None
        or not verdict.admitted
        or verdict.release != rollout.target
        or session.dry_run
        or rollout.status in ("done", "aborted")
    ):
        return
    lock, marquee = ctx.lease.lock, ctx.marquee.name
    wave = rollout.wave_of(verdict.key)
    try:
        if healthy:
            read = await mark_healthy(
                lock.redis, rollout.scope, rollout.id, marquee, wave=wave, timeout=lock.timeout
            )
            current = _parsed(read)
            if current is not None and current.id == rollout.id:
                await advance(ctx, session, current, read)
            return
        for _ in range(3):
            read = await read_rollout(lock.redis, rollout.scope, lock.timeout)
            current = _parsed(read)
            if current is None or current.id != rollout.id:
                return
            failed = current.with_failure(marquee, wave, why, read.now)
            if failed is None:
                return
            if await write_rollout(
                lock.redis, read, failed.encode(), opens=False, timeout=lock.timeout
            ):
                log.warning("rollout.failed_here", scope=rollout.scope, why=why[:200],
                            status=failed.status)  # fmt: skip
                return
    except RedisError as exc:
        log.warning("rollout.report_failed", scope=rollout.scope, error=str(exc)[:200])


def held_why(verdicts: Mapping[str, Verdict], playground: str) -> str | None:
    """Why the gate holds ``playground`` (None when it does not)."""
    verdict = verdicts.get(playground)
    return None if verdict is None or verdict.admitted else verdict.why
