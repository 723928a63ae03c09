"""Which Playgrounds are held at a revision that is not their branch head, and why: the one
answer sync_git (which commit a checkout is at) and reconcile_playgrounds (which images and
``.env`` it runs) share.

A Playground is held when an operator pinned it (``coordination.pins``), or when it runs under
``rollback: auto`` and the release at its branch head, with the images behind its tags now,
is the one that last failed its health gate (``remote.last_good.Failed.is_release``): it is then
held at its last good revision until the branch head or an image behind a tag moves again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from playguard_async.coordination.pins import LAST_GOOD, Pin, read_pins
from playguard_async.phases.toolkit import CycleContext
from playguard_async.remote.last_good import HealthRecord
from playguard_async.remote.ssh import RemoteSession


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


async def pins_of(ctx: CycleContext, session: RemoteSession) -> dict[str, Pin]:
    """The Marquee's pins, read from Redis once per cycle (a Redis round trip, no host's)."""
    lock = ctx.lease.lock

    async def read() -> dict[str, Pin]:
        return await read_pins(lock.redis, ctx.marquee.name, lock.timeout)

    return dict(await session.read_once(("pins", ctx.marquee.name), read, of_host=False))


def hold_of(
    pin: Pin | None,
    record: HealthRecord,
    *,
    rollback: str,
    head: str | None,
    tags: str | None,
) -> Hold | None:
    """The hold on one Playground, or None when it runs its branch head (``head``) as the
    images behind its tags (``tags``: their digest, None when not read) are now."""
    good = record.last_good
    if pin is not None:
        if pin.revision != LAST_GOOD:
            return Hold(pin.revision, None, pin.describe(), pin)
        if good is not None:
            return Hold(good.revision.commit, good.images, pin.describe(), pin)
        return None
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
    return None
