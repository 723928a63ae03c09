"""The lab's Marquee as the phase tests drive it, in one object, so each test takes one fixture
(``edge``) instead of repeating the list of lab fixtures it arranges from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiodocker

from playguard_async.phases.protocol import Phase
from playguard_async.remote.ssh import RemoteOptions
from playguard_lab import GitOrigin
from tests.support.playgrounds import use_own_branch
from tests.support.world import LAB_OPTIONS, LabWorld, PhaseRun, PhaseRunner


@dataclass
class LabEdge:
    """Marquee ``edge-1``: its desired state (``world``), a client of its dockerd (``docker``), the
    lab's git origin and busybox image that playgrounds are made from, and ``run``, one phase on
    it under a real lease with a real remote session."""

    world: LabWorld
    runner: PhaseRunner
    docker: aiodocker.Docker
    origin: GitOrigin
    image: str

    async def run(
        self, phase: Phase, *, dry_run: bool = False, options: RemoteOptions = LAB_OPTIONS
    ) -> PhaseRun:
        ran: PhaseRun = await self.runner(phase, self.world, dry_run=dry_run, options=options)
        return ran

    def own_branch(self, **compose: Any) -> str:
        """The playground on a branch of the test's own holding ``compose_yaml(image, **compose)``;
        returns the branch."""
        return use_own_branch(self.world, self.origin, self.image, **compose)
