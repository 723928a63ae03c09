"""The built-in phases, by the names settings use for them, in the order a cycle runs them."""

from __future__ import annotations

from playguard_async.phase import Phase
from playguard_async.phases.fetch_branches import fetch_branches
from playguard_async.phases.process_agent_chats import process_agent_chats
from playguard_async.phases.pull_images import pull_images
from playguard_async.phases.reconcile_playgrounds import reconcile_playgrounds
from playguard_async.phases.refresh_credentials import refresh_credentials
from playguard_async.phases.sweep_orphans import sweep_orphans
from playguard_async.phases.sync_git import sync_git

BUILTIN_PHASES: dict[str, Phase] = {
    phase.name: phase
    for phase in (
        sync_git,
        fetch_branches,
        refresh_credentials,
        pull_images,
        reconcile_playgrounds,
        process_agent_chats,
        sweep_orphans,
    )
}
