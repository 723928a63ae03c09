"""Keep each image the Marquee's playspecs list at the digest its registry serves now.

The cheap path, taken on every cycle, asks the registry for the tag's manifest digest and compares
it with the local image's RepoDigests: no layer is downloaded unless the image is absent or the tag
has moved. Credentials go only to the image's own registry (``auth_for``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from playguard_async.desired_state.model import Registry
from playguard_async.phases.protocol import PhaseReport
from playguard_async.phases.toolkit import CycleContext, change_outcome, finish, handle_each
from playguard_async.remote.registry import auth_for, local_digests, pull, registry_digest_once
from playguard_async.remote.ssh import RemoteSession


class PullImages:
    """Phase ``pull_images``.

    Findings: ``images`` maps each image reference to ``{"state", "digest"}`` with state
    ``unchanged``, ``pulled`` or ``would pull`` (digest: what the registry serves), or to
    ``{"state": "failed", "error"}``. Raises ``PartialFailure`` naming the images that failed,
    after the others were handled.
    """

    name = "pull_images"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        session = await ctx.remote()
        wanted = ctx.inventory.images_on(ctx.marquee.name)
        images, failed = await handle_each(
            ctx.log,
            "image",
            {
                ref: partial(_pull_if_stale, session, ref, registry)
                for ref, registry in wanted.items()
            },
        )
        report = PhaseReport(findings={"images": images})
        return finish(self.name, "image", report, failed)


async def _pull_if_stale(
    session: RemoteSession, reference: str, registry: Registry | None
) -> dict[str, Any]:
    auth = auth_for(reference, registry)
    digest = await registry_digest_once(session, reference, auth)
    if digest in (await local_digests(session, reference) or set()):
        return {"state": "unchanged", "digest": digest}
    await pull(session, reference, auth)
    return {"state": change_outcome(session, "pulled", "pull"), "digest": digest}


pull_images = PullImages()
