"""What several phases share: what a Marquee needs from registries, and how a phase that works
item by item (registry, image, chat) reports the items that failed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from structlog.typing import FilteringBoundLogger

from playguard_async.inventory import Inventory, InventoryError, Playspec, Registry
from playguard_async.phase import PartialFailure, PhaseReport
from playguard_async.phases._playgrounds import playspec_of
from playguard_async.remote.errors import DockerApiError, RemoteCommandFailed
from playguard_async.remote.ssh import RemoteSession

ItemWork = Callable[[], Awaitable[dict[str, Any]]]
"""One item's work: returns its finding; raises ``DockerApiError``, ``RemoteCommandFailed`` or
``InventoryError`` if the item cannot be handled (other errors, such as a lost connection or a
write the host's fence check refused, end the phase at once)."""


async def handle_each(
    log: FilteringBoundLogger, kind: str, work: Mapping[str, ItemWork]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Run each item's work in turn; one that fails is logged and found as ``{"state":
    "failed", "error"}`` and the others still run. Returns the findings and the failures."""
    findings: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for name, handle in work.items():
        try:
            findings[name] = await handle()
        except (DockerApiError, RemoteCommandFailed, InventoryError) as exc:
            failed[name] = str(exc)
            findings[name] = {"state": "failed", "error": str(exc)}
            log.error(f"{kind}.failed", **{kind: name}, error=str(exc))
    return findings, failed


def finish(phase: str, kind: str, report: PhaseReport, failed: Mapping[str, str]) -> PhaseReport:
    """``report``, or ``PartialFailure`` carrying it when any item failed."""
    if failed:
        raise PartialFailure(phase, kind, failed, report)
    return report


def change_outcome(session: RemoteSession, done: str, planned: str) -> str:
    """A finding's word for a change: ``done`` ("pulled"), or "would <planned>" in dry-run."""
    return f"would {planned}" if session.dry_run else done


def registry_of(inventory: Inventory, playspec: Playspec) -> Registry | None:
    """The registry the playspec pulls from, if it names one."""
    return next((r for r in inventory.registries if r.name == playspec.registry), None)


def images_on(inventory: Inventory, marquee: str) -> dict[str, Registry | None]:
    """Each image the playgrounds on ``marquee`` need, with its playspec's registry; an image in
    several playspecs appears once, with the registry of the first."""
    images: dict[str, Registry | None] = {}
    for playground in inventory.playgrounds_on(marquee):
        playspec = playspec_of(inventory, playground)
        for image in playspec.images:
            images.setdefault(image, registry_of(inventory, playspec))
    return images


def registries_on(inventory: Inventory, marquee: str) -> list[Registry]:
    """The registries the playgrounds on ``marquee`` pull from, each once, in inventory order."""
    used = {
        playspec_of(inventory, playground).registry
        for playground in inventory.playgrounds_on(marquee)
    }
    return [registry for registry in inventory.registries if registry.name in used]
