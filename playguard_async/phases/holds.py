"""Which Playgrounds are held at a revision that is not their branch head, and why: the one
answer sync_git (which commit a checkout is at) and reconcile_playgrounds (which images and
``.env`` it runs) share.

A Playground is held when an operator pinned it (``coordination.pins``), when it runs under
``rollback: auto`` and the release at its branch head, with the images behind its tags now,
is the one that last failed its health gate (``remote.last_good.Failed.is_release``): it is then
held at its last good revision until the branch head or an image behind a tag moves again; or
when a rollout has not admitted its Marquee yet (``phases.rollout_gate``).

A held Playground runs its images by digest: a ``last-good`` pin, a rollback and a rollout, the
last good revision's; a commit pin, the ones its services ran when a cycle first applied it
(``with_images``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import structlog

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.keys import pins_key
from playguard_async.coordination.pins import (
    LAST_GOOD,
    Pin,
    PinsRead,
    read_pin_record,
    record_pin_images,
    restore_pins,
)
from playguard_async.phases.container_drift import service_of
from playguard_async.phases.decision_copies import keep_pins, kept_pins
from playguard_async.phases.rollout_desk import RolloutHold
from playguard_async.phases.toolkit import Container, CycleContext
from playguard_async.remote.host_state import pinned_references
from playguard_async.remote.last_good import HealthRecord
from playguard_async.remote.ssh import RemoteSession

log = structlog.get_logger("playguard.decisions")


@dataclass(frozen=True)
class Hold:
    """A Playground held at ``commit`` (None: at whatever its checkout is at, for a record
    written before revisions had a commit), its services' images pinned by digest where
    ``images`` names them, and why, in words."""

    commit: str | None
    images: Mapping[str, str] | None
    why: str
    pin: Pin | None = None
    """The operator's pin, when it is one (a pinned Playground is not rolled back)."""
    rollout: bool = False
    """Held by a rollout that has not admitted this Marquee (``phases.rollout_gate``)."""
    back: bool = False
    """Held at the revision before its last good one (an aborted rollout's release)."""

    @property
    def shown(self) -> str:
        """Who holds it, in a few words for ``status``, ``describe`` and the web view:
        ``pinned at <commit> by <who>``, or a rollout's ``held by rollout <scope>, wave k of
        n (...)``."""
        return self.why if self.pin is None else self.pin.shown()

    @property
    def rolled_back(self) -> bool:
        """Held because its release failed: the rollback restores all of the last good
        revision (``.env`` too), where a pin or a rollout only keeps what runs."""
        return self.pin is None and not self.rollout


async def pins_of(ctx: CycleContext, session: RemoteSession) -> dict[str, Pin]:
    """The Marquee's pins, read from Redis once per cycle (a Redis round trip; the host's copy
    only in the first cycle of a process and when Redis's pins are older than this replica
    knows, ``phases.decision_copies``). A copy newer than what
    Redis holds is written back; a key of another type holds every Playground of the Marquee
    at its last good revision (fails closed)."""
    lock = ctx.lease.lock

    async def read() -> dict[str, Pin]:
        found = await read_pin_record(lock.redis, ctx.marquee.name, lock.timeout)
        if found.foreign:
            why = f"pins key {pins_key(ctx.marquee.name)} holds another type than a hash"
            return {
                pg.name: Pin(pg.name, LAST_GOOD, "?", "?", why, 0.0)
                for pg in ctx.inventory.playgrounds_on(ctx.marquee.name)
            }
        kept = await kept_pins(session, found.seq)
        if kept is not None and kept.seq > found.seq:
            found = await _rebuilt(lock.redis, lock.timeout, session, found, kept)
        await keep_pins(session, found)
        return dict(found.pins)

    return dict(await session.read_once(("pins", ctx.marquee.name), read, of_host=False))


async def _rebuilt(
    redis: RedisClient, timeout: float, session: RemoteSession, lost: PinsRead, kept: PinsRead
) -> PinsRead:
    """The pins once ``kept`` (newer than what Redis holds, ``lost``) is written back; what
    Redis holds still when another writer changed them since (the next cycle compares again)."""
    if session.dry_run:
        return kept
    if not await restore_pins(redis, lost, kept, timeout):
        return lost
    log.warning("decisions.rebuilt", kind="pins", marquee=lost.marquee, redis_had=lost.seq,
                seq=kept.seq, pins=sorted(kept.pins))  # fmt: skip
    return kept


async def with_images(
    ctx: CycleContext, session: RemoteSession, pin: Pin | None, own: list[Container]
) -> Pin | None:
    """``pin`` with the images it holds. A commit pin that holds none yet is being applied for
    the first time: it holds what each service's container runs now, by digest (read before this
    cycle changes anything, so a tag pulled since the pin was taken is not it), written into the
    pin (not in a dry run). A service that had no container then runs what its tag names."""
    if pin is None or pin.revision == LAST_GOOD or pin.images is not None:
        return pin
    running = {service_of(c): str(c["ImageID"]) for c in own if service_of(c)}
    if not running:
        return pin
    by_digest = await pinned_references(session, sorted(set(running.values())))
    images = {service: by_digest[image] for service, image in running.items()}
    if session.dry_run:
        return replace(pin, images=images)
    lock = ctx.lease.lock
    return await record_pin_images(lock.redis, ctx.marquee.name, pin, images, lock.timeout)


def hold_of(
    pin: Pin | None,
    record: HealthRecord,
    *,
    rollback: str,
    head: str | None,
    tags: str | None,
    rollout: RolloutHold | None = None,
) -> Hold | None:
    """The hold on one Playground, or None when it runs its branch head (``head``) as the
    images behind its tags (``tags``: their digest, None when not read) are now. A pin comes
    first, then a rollback from a failed release, then a rollout that holds it, each at its last
    good revision (a Playground with none cannot be held there), or for an aborted rollout's
    release, at the one before it. That one comes before a failed release's rollback: a
    rollback onto an aborted release would run it again."""
    good = record.last_good
    if pin is not None:
        if pin.revision != LAST_GOOD:
            return Hold(pin.revision, pin.images, pin.describe(), pin)
        if good is not None:
            return Hold(good.revision.commit, good.images, pin.describe(), pin)
        return None
    if rollout is not None and rollout.back and record.previous is not None:
        before = record.previous
        return Hold(before.revision.commit, before.images, rollout.why, rollout=True, back=True)
    failed = record.failed
    if (
        rollback == "auto"
        and good is not None
        and failed is not None
        and tags is not None
        and failed.is_release(head, tags)
    ):
        assert failed.commit is not None
        why = f"held at its last good revision: release {failed.commit[:12]} failed"
        return Hold(good.revision.commit, good.images, why)
    if rollout is not None and good is not None:
        return Hold(good.revision.commit, good.images, rollout.why, rollout=True)
    return None
