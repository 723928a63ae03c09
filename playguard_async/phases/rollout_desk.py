"""Where a cycle meets its Marquee's rollouts in Redis: the verdict for one Playground and what
the cycle tells the rollout afterwards. Nothing here touches a host: the gate
(``phases.rollout_gate``) brings what the host and registry say (the release, the last good
revision), so a simulation of the fleet (``bench/rollout.py``) runs this very code.

Each scope's record is read once per cycle (with Redis's clock and the wave counts); every change
is a compare-and-set over what was read (``coordination.rollouts``), so two replicas never take
the same step twice, and a replica killed between two steps leaves the record whole. A dry run
reads and never writes. Each record read is parsed once per change (``phases.rollout_reads``,
which also lists the records for operators).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog
from redis.exceptions import RedisError

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.keys import rollout_key
from playguard_async.coordination.rollouts import (
    FOREIGN,
    RolloutRead,
    mark_healthy,
    read_rollout,
    unmarked,
    write_rollout,
)
from playguard_async.desired_state.model import Inventory, Marquee, Playground, Playspec
from playguard_async.desired_state.rollout_policy import (
    RolloutPolicy,
    admission_key,
    wave_members,
    waves_of,
)
from playguard_async.desired_state.windows import Window, allows
from playguard_async.phases.protocol import PhaseContext
from playguard_async.phases.rollout_reads import parsed_rollout
from playguard_async.phases.rollout_record import Rollout

log = structlog.get_logger("playguard.rollouts")

TRIES = 3
"""Reads and compare-and-sets a failure report makes before it leaves it to the next cycle."""


def policy_of(ctx: PhaseContext[Any], playspec: Playspec) -> RolloutPolicy | None:
    """The Playspec's rollout policy, else the fleet's (``ctx.rollout_default``)."""
    return playspec.rollout or ctx.rollout_default


def staged_playgrounds(
    ctx: PhaseContext[Any],
) -> list[tuple[Playground, Playspec, RolloutPolicy]]:
    """This Marquee's running Playgrounds whose release a rollout stages (a policy that takes
    their cohort in more than one wave), with their Playspec and policy."""
    inventory = ctx.inventory
    return [
        (playground, playspec, policy)
        for playground in inventory.playgrounds_on(ctx.marquee.name)
        if playground.state == "running"
        and (policy := policy_of(ctx, playspec := inventory.playspec_of(playground)))
        and policy.staged(len(inventory.cohort(playground.playspec, playground.branch)))
    ]


def scope_of(playground: Playground) -> str:
    """The rollout scope of a Playground: its Playspec at its branch (``@`` is in neither)."""
    return f"{playground.playspec}@{playground.branch}"


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
    back: bool = False
    stop: bool = False
    """It runs an aborted release and has no revision before it: its services are stopped."""

    @property
    def hold(self) -> RolloutHold | None:
        """The hold it puts on the Playground (None: admitted)."""
        return None if self.admitted else RolloutHold(self.why, self.back)

    @property
    def aborted(self) -> frozenset[str]:
        """The releases of its scope known aborted (none without a rollout)."""
        return frozenset() if self.rollout is None else self.rollout.aborted

    @property
    def admitted_release(self) -> str | None:
        """The release the rollout admitted the Playground to (None: not admitted), which its
        last good revision records once verified."""
        return self.release if self.admitted else None


@dataclass(frozen=True)
class Told:
    """What telling a rollout came to: the record as it left it, whether this Marquee's
    failure was counted now, and whether that halted the rollout (this cycle's news alone:
    exactly one cycle, on whichever replica, halts a rollout)."""

    rollout: Rollout
    failed: bool
    halted: bool


@dataclass(frozen=True)
class RolloutHold:
    """Why a rollout holds a Playground, and whether at the revision before its last good one
    (``back``: its Marquee runs an aborted rollout's release)."""

    why: str
    back: bool = False


@dataclass(frozen=True)
class Standing:
    """What the host says of a Playground, for its verdict: whether it has a last good
    revision (one with none cannot be held anywhere), and the release that revision was."""

    has_good: bool
    good_release: str | None
    has_previous: bool
    """It keeps the last good revision before that one (where an abort takes it back)."""
    rolls_back: bool
    """Its Playspec's ``rollback`` is ``auto``: a failed Marquee is held at its last good
    revision by the rollout too (else it is left as its health gate left it)."""
    previous_release: str | None = None
    """The release that revision before was (None: none or not known)."""
    kept: Rollout | None = None
    """The newest record of its scope known outside Redis (this replica's memory, the host's
    copy: ``phases.decision_copies``); written back when Redis holds an older one or none."""


@dataclass
class RolloutDesk:
    """One cycle's dealings with the rollouts of one Marquee's Playgrounds."""

    redis: RedisClient
    timeout: float
    inventory: Inventory
    marquee: Marquee
    dry_run: bool
    windows_default: Sequence[Window] = ()
    versions_mixed: str | None = None
    """Why no new wave starts now (replicas of different versions share the fleet:
    ``coordination.replicas``), else None."""
    reads: dict[str, RolloutRead] = field(default_factory=dict)

    async def verdict(
        self,
        playground: Playground,
        policy: RolloutPolicy,
        release: str | None,
        head: str,
        standing: Standing,
    ) -> Verdict:
        """May ``playground`` run ``release`` (its branch at ``head``) now? Opens the scope's
        rollout of it when the scope has none and this Playground would change, and takes the
        rollout's steps that are due."""
        scope = scope_of(playground)
        key = admission_key(scope, self.marquee.name, canary=self.marquee.canary)
        unheld = not standing.has_good
        try:
            read = await self._read(scope)
        except RedisError as exc:
            log.warning("rollout.unavailable", scope=scope, error=str(exc)[:200])
            return Verdict(scope, release, None, unheld, key, "rollout state unreadable")
        if release is None:
            return Verdict(scope, None, None, unheld, key, "release not known")
        if read.raw == FOREIGN:  # fails closed: no record this process can trust
            parsed_rollout(read)  # its one line
            why = f"rollout record {rollout_key(scope)} holds another type than a string"
            return Verdict(scope, release, None, unheld, key, why)
        rollout = await self._with_copy(read, parsed_rollout(read), standing.kept, scope)
        at_target = standing.good_release == release
        if rollout is None or rollout.target != release:
            if at_target or unheld:
                return Verdict(scope, release, rollout, True, key)
            if rollout is not None and release in rollout.superseded_before:
                return await self._behind(scope, release, rollout, key, standing)
            if self.versions_mixed is not None:
                return Verdict(scope, release, rollout, False, key, self._no_new_wave())
            rollout = await self._open(read, release, head, policy)
            if rollout is None:
                return Verdict(scope, release, None, False, key, "rollout opening raced")
        rollout = await self._take_steps(rollout)
        admitted = (
            rollout.admits(key, at_target=at_target)
            or unheld
            or (rollout.failed(self.marquee.name) and not standing.rolls_back)
        )
        # A failed Marquee that its health gate rolls back would run its last good revision,
        # not the release: when that revision is an aborted release, it is taken back too.
        runs_release = (
            admitted
            and release not in rollout.aborted
            and not (rollout.failed(self.marquee.name) and standing.rolls_back)
        )
        if standing.good_release in rollout.aborted and not runs_release:
            return self._taken_back(scope, release, rollout, key, standing)
        why = rollout.where(key)
        if not admitted and self.versions_mixed is not None and rollout.status == "running":
            why = f"{why}; {self._no_new_wave()}"
        return Verdict(scope, release, rollout, admitted, key, why)

    async def recorded(self, scopes: Iterable[str]) -> dict[str, int]:
        """Scope -> the write count of Redis's record of it (-1: none, or none readable), for
        the scopes Redis answered about: what ``kept_rollouts`` compares its copies with. The
        reads are the ones the verdicts then use (no Redis command more)."""
        found: dict[str, int] = {}
        for scope in scopes:
            try:
                read = await self._read(scope)
            except RedisError:
                continue  # the verdict says so
            found[scope] = -1 if read.raw == FOREIGN else _seq(parsed_rollout(read))
        return found

    async def _with_copy(
        self, read: RolloutRead, rollout: Rollout | None, kept: Rollout | None, scope: str
    ) -> Rollout | None:
        """``rollout`` (Redis's record of ``scope``) after what a copy outside Redis (``kept``:
        the replica's memory, the host's file) knows that it does not: the copy whole when it
        is newer (Redis forgot or went back), else the decisions it holds that the record lacks
        (two replicas rebuilt from copies of different ages count from the same number)."""
        if kept is None or kept.scope != scope or kept is rollout:
            return rollout
        if kept.seq > _seq(rollout):
            return await self._rebuild(read, rollout, kept.rebuilt(rollout, read.now))
        if rollout is not None and (lacking := rollout.with_decisions_of(kept, read.now)):
            return await self._rebuild(read, rollout, lacking.stored_over(rollout))
        return rollout

    async def _behind(
        self, scope: str, release: str, rollout: Rollout, key: str, standing: Standing
    ) -> Verdict:
        """The verdict on a Playground whose view of the scope (its host's ``ls-remote``, the
        registry's answer) names a release an earlier rollout of the scope targeted and a later
        one replaced: a view that lags, which opens no rollout (one that did would send the
        scope back to wave 1, then the views that do not lag would open theirs again, and so on
        every tick). It is held where it is, or taken back from an aborted release; the scope's
        rollout takes its steps. A branch really moved back to that commit is released anew by
        a new commit (``git revert``), or undone by ``rollout abort``."""
        rollout = await self._take_steps(rollout)
        if standing.good_release in rollout.aborted:
            return self._taken_back(scope, release, rollout, key, standing)
        why = (
            f"{rollout.where(key)}: release {release[:12]} is older than its release "
            f"{rollout.target[:12]} (rollout {rollout.id}), which replaced it; "
            "this view of the branch or registry lags"
        )
        return Verdict(scope, release, rollout, False, key, why)

    def _taken_back(
        self, scope: str, release: str, rollout: Rollout, key: str, standing: Standing
    ) -> Verdict:
        """The verdict on a Playground whose last good revision is an aborted release and
        that the scope's rollout (that one's or a newer one's) does not admit elsewhere: back
        at the revision before it, or stopped when it has none or that one was aborted too."""
        assert standing.good_release is not None
        aborted = f"release {standing.good_release[:12]} was aborted"
        before = standing.previous_release
        if standing.has_previous and before not in rollout.aborted:
            why = f"{rollout.where(key)}: {aborted}, back at the revision before it"
            return Verdict(scope, release, rollout, False, key, why, back=True)
        if standing.has_previous:
            nowhere = f"the revision before it, release {str(before)[:12]}, was aborted too"
        else:
            nowhere = "there is no revision before it to go back to"
        why = f"{rollout.where(key)}: {aborted} and {nowhere}"
        return Verdict(scope, release, rollout, False, key, why, stop=True)

    def _no_new_wave(self) -> str:
        return f"no new wave while {self.versions_mixed}"

    async def tell(self, verdict: Verdict, healthy: bool | None, why: str) -> Told | None:
        """Tell the rollout how the Playground it admitted came out: verified healthy at its
        target (``healthy`` True), failed (False, ``why``), or not known yet (None). Returns the
        record as this told left it (None when nothing was told).

        A healthy Marquee of a wave the record read has moved past tells nothing: its mark
        counts for nothing any more (a wave's count and marks are read only while it is the
        current one: its completion, its timeout), so the mark script is not run each cycle of
        each earlier wave's Marquees until the rollout is done. That holds whatever Redis kept of
        the marks; a Marquee of the current wave still marks itself every cycle, which also puts
        back a mark Redis lost."""
        rollout = verdict.rollout
        if (
            rollout is None
            or healthy is None
            or not verdict.admitted
            or verdict.release != rollout.target
            or self.dry_run
            or rollout.status in ("done", "aborted")
        ):
            return None
        wave = rollout.wave_of(verdict.key)
        if healthy and wave < rollout.wave:
            return None
        try:
            if healthy:
                read = await mark_healthy(
                    self.redis, rollout.scope, rollout.id, self.marquee.name,
                    wave=wave, timeout=self.timeout,
                )  # fmt: skip
                current = parsed_rollout(read)
                if current is None or current.id != rollout.id:
                    return None
                return Told(await self._advance(current, read), failed=False, halted=False)
            return await self._fail(rollout, wave, why)
        except RedisError as exc:
            log.warning("rollout.report_failed", scope=rollout.scope, error=str(exc)[:200])
            return None

    async def _fail(self, rollout: Rollout, wave: int, why: str) -> Told | None:
        for _ in range(TRIES):
            read = await read_rollout(self.redis, rollout.scope, self.timeout)
            current = parsed_rollout(read)
            if current is None or current.id != rollout.id:
                return None
            failed = current.with_failure(self.marquee.name, wave, why, read.now)
            if failed is None:
                return Told(current, failed=False, halted=False)  # counted already
            failed = failed.stored_over(current)
            if await write_rollout(self.redis, read, failed.encode(), opens=False,
                                   timeout=self.timeout):  # fmt: skip
                log.warning("rollout.failed_here", scope=rollout.scope, why=why[:200],
                            status=failed.status)  # fmt: skip
                halted = failed.status == "halted" and current.status != "halted"
                return Told(failed, failed=True, halted=halted)
        return None

    async def _rebuild(
        self, read: RolloutRead, lost: Rollout | None, rebuilt: Rollout
    ) -> Rollout | None:
        """``rebuilt`` (a copy kept outside Redis, or Redis's record with the decisions a copy
        kept and it lacks: ``Rollout.with_decisions_of``) written over ``lost`` (what Redis
        holds of the scope's record: older, none, garbage, or lacking a decision): Redis
        forgot, the decision stands. What is stored when another replica wrote first."""
        if self.dry_run:
            return rebuilt
        if await write_rollout(self.redis, read, rebuilt.encode(), opens=True,
                               timeout=self.timeout):  # fmt: skip
            log.warning("decisions.rebuilt", kind="rollout", scope=read.scope,
                        redis_had=None if lost is None else lost.seq, seq=rebuilt.seq,
                        status=rebuilt.status, wave=rebuilt.wave + 1)  # fmt: skip
            self.reads[read.scope] = RolloutRead(read.scope, rebuilt.encode(), {}, read.now)
            return rebuilt
        fresh = await read_rollout(self.redis, read.scope, self.timeout)
        self.reads[read.scope] = fresh
        return parsed_rollout(fresh)

    async def _read(self, scope: str) -> RolloutRead:
        if scope not in self.reads:
            self.reads[scope] = await read_rollout(self.redis, scope, self.timeout)
        return self.reads[scope]

    async def _open(
        self, read: RolloutRead, release: str, head: str, policy: RolloutPolicy
    ) -> Rollout | None:
        """A rollout of ``release`` to the scope's cohort, written over the record read; when
        another replica wrote first, the record it wrote (None if that is not this release's)."""
        playspec, _, branch = read.scope.partition("@")
        keys = [
            admission_key(read.scope, member.name, canary=member.canary)
            for member in self.inventory.cohort(playspec, branch)
        ]
        was = parsed_rollout(read)
        rollout = Rollout.open(
            read.scope, release, head, policy, waves_of(policy, keys), now=read.now, after=was
        ).stored_over(was)
        if self.dry_run:
            return rollout  # what plan shows: the rollout this cycle would open
        if await write_rollout(self.redis, read, rollout.encode(), opens=True,
                               timeout=self.timeout):  # fmt: skip
            log.info("rollout.opened", scope=read.scope, release=release[:12],
                     waves=[wave.size for wave in rollout.waves])  # fmt: skip
            self.reads[read.scope] = RolloutRead(read.scope, rollout.encode(), {}, read.now)
            return rollout
        fresh = await read_rollout(self.redis, read.scope, self.timeout)
        self.reads[read.scope] = fresh
        other = parsed_rollout(fresh)
        return other if other is not None and other.target == release else None

    async def _take_steps(self, rollout: Rollout) -> Rollout:
        """The rollout after the steps due now: a wave timed out, completed, baked, stalled."""
        read = self.reads[rollout.scope]
        if rollout.timed_out(read.now):
            rollout = await self._time_out(rollout, read)
        rollout = await self._advance(rollout, self.reads[rollout.scope])
        if rollout.stalled(read.now):
            pending = await self._pending(rollout, self.reads[rollout.scope])
            if pending:
                rollout = await self._stored(read, rollout, rollout.with_stall(pending, read.now))
        return rollout

    def _wave_members(self, rollout: Rollout) -> tuple[str, ...]:
        """The Marquees of ``rollout``'s current wave as its cohort stands now: one that left
        the cohort left its wave, one that joined is in the wave its admission key falls in."""
        playspec, _, branch = rollout.scope.partition("@")
        return wave_members(rollout.scope, rollout.waves, self.inventory.cohort(playspec, branch))[
            rollout.wave
        ]

    async def _pending(self, rollout: Rollout, read: RolloutRead) -> list[str]:
        """The current wave's Marquees neither counted failed nor verified healthy at the
        target. The wave's healthy count bounds how many can be verified, so while it is
        below the Marquees waited for, no set is read (every cycle of the cohort asks)."""
        failed = {failure.marquee for failure in rollout.failures}
        waiting = [name for name in self._wave_members(rollout) if name not in failed]
        if read.healthy.get(rollout.wave, 0) < len(waiting):
            return waiting
        return await unmarked(self.redis, rollout.scope, waiting, self.timeout)

    async def _time_out(self, rollout: Rollout, read: RolloutRead) -> Rollout:
        """The current wave's Marquees that were never verified healthy, counted as failed."""
        changed = rollout
        why = f"not verified healthy within wave_timeout {rollout.policy.wave_timeout:g} s"
        members = list(self._wave_members(rollout))
        for name in await unmarked(self.redis, rollout.scope, members, self.timeout):
            if not self._windowed_out(name, read.now):
                changed = changed.with_failure(name, rollout.wave, why, read.now) or changed
        return await self._stored(read, rollout, changed)

    def _windowed_out(self, marquee: str, now: float) -> bool:
        """Whether ``marquee``'s maintenance windows keep its cycles from changing it now (it is
        pending, not failed). One this replica does not hold (a PostgreSQL share lists the
        others' Marquees without their windows) is not judged here: it counts as windowed out,
        and the replica that holds it, which knows its windows, counts it failed or not."""
        try:
            own = self.inventory.marquee(marquee).windows
        except KeyError:
            return True
        windows = self.windows_default if own is None else own
        return bool(windows) and not allows(windows, datetime.fromtimestamp(now, UTC))

    async def _advance(self, rollout: Rollout, read: RolloutRead) -> Rollout:
        """``rollout`` after the steps due by ``read`` (marks and time), written if any is."""
        changed = rollout
        while (step := await self._step(changed, read)) is not None:
            changed = step  # a bake of 0 s: the wave completes and the next starts at once
        return rollout if changed is rollout else await self._stored(read, rollout, changed)

    async def _step(self, rollout: Rollout, read: RolloutRead) -> Rollout | None:
        if rollout.status != "running":
            return None
        complete = rollout.healthy_at is not None or not await self._pending(rollout, read)
        return rollout.progressed(complete, read.now, may_start=self.versions_mixed is None)

    async def _stored(self, read: RolloutRead, was: Rollout, now: Rollout) -> Rollout:
        """``now`` written over ``was`` (as ``read``); what is stored when another replica
        wrote first (its step is then the one taken; this one is computed again next cycle)."""
        if now == was or self.dry_run:
            return now
        now = now.stored_over(was)
        if await write_rollout(self.redis, read, now.encode(), opens=False, timeout=self.timeout):
            self.reads[read.scope] = RolloutRead(read.scope, now.encode(), read.healthy, read.now)
            if now.events != was.events:
                log.info("rollout.step", scope=now.scope, step=now.events[-1].what,
                         why=now.events[-1].why, status=now.status)  # fmt: skip
            return now
        fresh = await read_rollout(self.redis, read.scope, self.timeout)
        self.reads[read.scope] = fresh
        current = parsed_rollout(fresh)
        return current if current is not None and current.id == was.id else was


def _seq(rollout: Rollout | None) -> int:
    return -1 if rollout is None else rollout.seq
