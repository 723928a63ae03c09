"""What the built-in phases are made of beyond their own logic: a playground's compose project, its
containers and its branch heads as the host shows them; and how a phase that works item by item
(registry, image, chat) reports the items that failed.

Reads only, except ``stop_if_up``, which changes the host through the session's funnel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from structlog.typing import FilteringBoundLogger

from playguard_async.cycle_record import NoticeKind
from playguard_async.desired_state.model import Inventory, InventoryError, Playground
from playguard_async.phases.protocol import Notice, PartialFailure, PhaseContext, PhaseReport
from playguard_async.remote import git
from playguard_async.remote.compose import PROJECT_LABEL, ComposeProject
from playguard_async.remote.docker import PLAYGROUND
from playguard_async.remote.errors import DockerApiError, RemoteCommandFailed
from playguard_async.remote.ssh import RemoteSession

CycleContext = PhaseContext[RemoteSession]
"""The context a built-in phase takes: ``await ctx.remote()`` is the cycle's ``RemoteSession``."""

Container = dict[str, Any]
"""One entry of the Engine API's container listing (``list_ours``)."""

# States in which a container holds its processes (a paused one still does).
_UP_STATES = frozenset({"running", "restarting", "paused"})


# -- playgrounds on the host -------------------------------------------------------------------


def compose_project(
    session: RemoteSession, inventory: Inventory, playground: Playground
) -> ComposeProject:
    return ComposeProject(
        marquee=session.marquee,
        playground=playground.name,
        compose_file=inventory.playspec_of(playground).compose_file,
        compose_command=session.options.compose_command,
    )


async def branch_heads(session: RemoteSession, repos: Iterable[str]) -> dict[str, dict[str, str]]:
    """Branch -> commit for each distinct repo, side by side: one ``ls-remote`` per repo per
    cycle, shared by every phase that asks (sync_git, fetch_branches, reconcile_playgrounds)."""
    distinct = sorted(set(repos))
    heads = await asyncio.gather(*(_heads_of(session, repo) for repo in distinct))
    return dict(zip(distinct, heads, strict=True))


async def _heads_of(session: RemoteSession, repo: str) -> dict[str, str]:
    async def list_heads() -> dict[str, str]:
        return git.parse_heads((await session.run(git.ls_remote_heads(repo))).stdout)

    return dict(await session.read_once(("ls-remote", repo), list_heads, of_host=False))


async def check_out_held(
    session: RemoteSession, action: str, checkout: str, repo: str, commit: str
) -> str | None:
    """Put ``checkout`` at ``commit``, a revision it is held at (a pin, a rollback, a
    rollout's hold); None once done, else why it could not be, in one line: the commit is not
    on the origin (a pin at a commit that never was, one force-pushed away and collected), or
    the origin did not answer. That is the one Playground's failure, not its Marquee's: the
    caller reports it and goes on with the others, the checkout left as it was."""
    try:
        await session.change(action, git.check_out(checkout, repo, commit))
    except RemoteCommandFailed as exc:
        return " ".join(exc.stderr_tail.split()) or f"git exited {exc.exit_status}"
    return None


def containers_of(containers: Iterable[Container], project: ComposeProject) -> list[Container]:
    """The containers of the playground's compose project. Its agent chats' containers carry its
    label too, but compose did not make them, so compose commands must not be judged by them."""
    return [
        container
        for container in containers
        if container["Labels"].get(PLAYGROUND) == project.playground
        and container["Labels"].get(PROJECT_LABEL) == project.name
    ]


def branch_gone_notices(gone: Mapping[str, str]) -> list[Notice]:
    """Playground -> its branch that is gone, as notices."""
    return [Notice(NoticeKind.BRANCH_GONE, name, branch) for name, branch in gone.items()]


def is_up(container: Container) -> bool:
    return container["State"] in _UP_STATES


def listed_name(container: Container) -> str:
    """The name the container listing shows for the container (its short id if it has none)."""
    names: list[str] = container.get("Names") or []
    return names[0].lstrip("/") if names else str(container["Id"])[:12]


def created_at(container: Container) -> datetime:
    """When the host's engine created the container (the listing gives whole seconds)."""
    return datetime.fromtimestamp(container["Created"], UTC)


async def stop_if_up(
    session: RemoteSession, project: ComposeProject, containers: list[Container], reason: str
) -> bool:
    """``compose stop`` when any container of the project still holds processes; True if so."""
    if not any(is_up(container) for container in containers):
        return False
    await session.change(f"stop playground {project.playground} ({reason})", project.stop())
    return True


# -- item by item --------------------------------------------------------------------------------

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
    """``report`` with a notice for each item that failed, or ``PartialFailure`` carrying it when
    any did."""
    report.notices += [Notice(NoticeKind.FAILED, name, error) for name, error in failed.items()]
    if failed:
        raise PartialFailure(phase, kind, failed, report)
    return report


def change_outcome(session: RemoteSession, done: str, planned: str) -> str:
    """A finding's word for a change: ``done`` ("pulled"), or "would <planned>" in dry-run."""
    return f"would {planned}" if session.dry_run else done
