"""sweep_orphans: remove our containers whose playground or agent chat is no longer wanted here.

Only containers listed by ``list_ours`` are candidates, so a container without our labels is never
touched, whatever its name. A container belongs to its agent chat when it names one (a chat's
container names its playground too), else to its playground; it is an orphan when that owner is
not in the inventory for this Marquee any more. A container naming neither is left alone: nothing
says whose it is. Orphans are removed (forced, with their anonymous volumes) once older than
``orphan_grace``, aged on the host engine's clock, so a container started moments before an
inventory change is not lost to a replica reading an older inventory.
"""

from __future__ import annotations

from typing import Any

from playguard_async.desired_state.model import Inventory
from playguard_async.phases.protocol import PhaseReport
from playguard_async.phases.toolkit import (
    Container,
    CycleContext,
    created_at,
    listed_name,
)
from playguard_async.remote.docker import (
    AGENT_CHAT,
    PLAYGROUND,
    host_now,
    list_ours,
    remove_container,
)


class SweepOrphans:
    name = "sweep_orphans"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        """Findings: ``removed`` (orphans removed, or that would be in dry-run) and ``in_grace``
        (orphans kept until older than ``orphan_grace``), as container names."""
        session = await ctx.remote()
        findings: dict[str, Any] = {"removed": [], "in_grace": []}
        orphans = {
            listed_name(container): (container, owner)
            for container in await list_ours(session)
            if (owner := _gone_owner(container, ctx.inventory, ctx.marquee.name)) is not None
        }
        if orphans:
            now = await host_now(session)
            for name, (container, owner) in sorted(orphans.items()):
                age = (now - created_at(container)).total_seconds()
                if age < session.options.orphan_grace:
                    findings["in_grace"].append(name)
                    continue
                await session.change(
                    f"remove orphan container {name} of {owner}, {age:.0f}s old",
                    remove_container(session.marquee, container["Id"]),
                )
                findings["removed"].append(name)
        return PhaseReport(findings=findings)


def _gone_owner(container: Container, inventory: Inventory, marquee: str) -> str | None:
    """The owner the container names, e.g. "agent chat chat-1", when the inventory no longer
    wants it on ``marquee``; None when it does, or when the container names no owner."""
    labels = container["Labels"]
    if AGENT_CHAT in labels:
        chat = labels[AGENT_CHAT]
        return None if inventory.wants_agent_chat(marquee, chat) else f"agent chat {chat}"
    if PLAYGROUND in labels:
        playground = labels[PLAYGROUND]
        return (
            None if inventory.wants_playground(marquee, playground) else f"playground {playground}"
        )
    return None


sweep_orphans = SweepOrphans()
