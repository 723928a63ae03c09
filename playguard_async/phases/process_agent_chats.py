"""One container per active agent chat; what a finished or closed chat left behind, recorded.

A chat's container is named ``pg-chat-<chat>`` and found by that name in one listing of our
containers, so a container we did not label is never taken for a chat's (creating ours then fails
with a name conflict, reported for that chat). The container runs once: an exited container is a
finished chat, reported with its exit status and the tail of its logs and left in place, never
restarted; one still "created" was left by a cycle that stopped between create and start, and is
started. A container made from another image, command or network than the desired state now
names (a digest of them is kept in a label) is replaced, whatever its state; one without that label
(made by an older playguard) is taken as it is. A closed chat's
container is reported the same way, then removed (killed first if it still runs). Containers
of chats the inventory no longer lists are left to the orphan sweep.
"""

from __future__ import annotations

import hashlib
import json
from functools import partial
from typing import Any

from playguard_async.desired_state.model import AgentChat, Inventory
from playguard_async.phases.protocol import PhaseReport
from playguard_async.phases.toolkit import (
    CycleContext,
    ItemWork,
    change_outcome,
    finish,
    handle_each,
)
from playguard_async.remote.docker import (
    FENCE,
    list_ours,
    our_labels,
    remove_container,
    run_container,
    start_container,
)
from playguard_async.remote.registry import auth_for, local_digests, pull
from playguard_async.remote.ssh import RemoteSession

LOG_TAIL_LINES = 50
LOG_LINE_CHARS = 500
"""A finding holds at most this many lines of a chat's output, each cut to this many characters."""

_FINISHED_STATES = frozenset({"exited", "dead"})

CONFIG = "io.playguard.agent-chat-config"
"""Label holding the digest of what the chat's container was made from (``_config_digest``)."""


def chat_container_name(chat: str) -> str:
    """The name of the agent chat's container (``pg-chat-<chat>``), by which it is found."""
    return f"pg-chat-{chat}"


class ProcessAgentChats:
    """Phase ``process_agent_chats``.

    Findings: ``chats`` maps each chat with a container (or one to start) to ``{"state", ...}``:
    ``running`` (or another live Docker state: ``paused``, ``restarting``), ``started`` or
    ``would start``; ``finished``, ``removed`` or ``would remove``, each with ``container_state``,
    ``exit_status`` (None if it still ran) and ``log_tail``; or ``failed`` with ``error``. Raises
    ``PartialFailure`` naming the chats that failed, after the others were handled.
    """

    name = "process_agent_chats"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        session = await ctx.remote()
        by_name = {
            name.lstrip("/"): container
            for container in await list_ours(session)
            for name in container.get("Names") or []
        }
        work: dict[str, ItemWork] = {}
        for chat in ctx.inventory.agent_chats_on(ctx.marquee.name):
            container = by_name.get(chat_container_name(chat.name))
            if chat.state == "active":
                work[chat.name] = partial(_keep, session, ctx.inventory, chat, container)
            elif container is not None:
                work[chat.name] = partial(_remove_closed, session, chat, container)
        chats, failed = await handle_each(ctx.log, "agent_chat", work)
        report = PhaseReport(findings={"chats": chats})
        return finish(self.name, "agent_chat", report, failed)


async def _keep(
    session: RemoteSession, inventory: Inventory, chat: AgentChat, listed: dict[str, Any] | None
) -> dict[str, Any]:
    """An active chat: start its container if it has none or it never ran, replace it when its
    image, command or network changed in the desired state; report otherwise."""
    name = chat_container_name(chat.name)
    wanted = _config_digest(session, chat)
    ending: dict[str, Any] = {}
    if listed is not None and listed["Labels"].get(CONFIG, wanted) != wanted:
        ending = await _ending(session, listed["Id"])
        await session.change(
            f"replace agent chat container {name} (its image, command or network changed)",
            remove_container(session.marquee, listed["Id"]),
        )
        listed = None
    if listed is None:
        await _pull_if_absent(session, inventory, chat)
        argv = run_container(
            session.marquee,
            name,
            image=chat.image,
            command=chat.command,
            labels=_labels(session, chat, wanted),
            network=session.options.agent_chat_network,
        )
    elif listed["State"] == "created":
        argv = start_container(session.marquee, listed["Id"])
    elif listed["State"] in _FINISHED_STATES:
        return {"state": "finished", **await _ending(session, listed["Id"])}
    else:
        return {"state": listed["State"]}
    await session.change(f"start agent chat container {name}", argv)
    if ending:
        return {"state": change_outcome(session, "replaced", "replace"), "previous": ending}
    return {"state": change_outcome(session, "started", "start")}


async def _remove_closed(
    session: RemoteSession, chat: AgentChat, listed: dict[str, Any]
) -> dict[str, Any]:
    """A closed chat: record how its container ended, then remove it."""
    ending = await _ending(session, listed["Id"])
    await session.change(
        f"remove agent chat container {chat_container_name(chat.name)}",
        remove_container(session.marquee, listed["Id"]),
    )
    return {"state": change_outcome(session, "removed", "remove"), **ending}


async def _ending(session: RemoteSession, container_id: str) -> dict[str, Any]:
    """The container's state, its exit status (None while it runs) and its last log lines."""
    container = session.docker.containers.container(container_id)
    details = await session.api(container.show())
    state = details["State"]
    output = await session.api(container.log(stdout=True, stderr=True, tail=LOG_TAIL_LINES))
    lines = "".join(output).splitlines()[-LOG_TAIL_LINES:]
    return {
        "container_state": state["Status"],
        "exit_status": None if state["Running"] else state["ExitCode"],
        "log_tail": [line[:LOG_LINE_CHARS] for line in lines],
    }


async def _pull_if_absent(session: RemoteSession, inventory: Inventory, chat: AgentChat) -> None:
    """Chat images are not among the playspecs' images that ``pull_images`` keeps current: pull
    one the host lacks, with the credentials of the chat's playspec registry if it hosts it."""
    if await local_digests(session, chat.image) is None:
        registry = inventory.registry_of(inventory.playspec_of(inventory.playground_of(chat)))
        await pull(session, chat.image, auth_for(chat.image, registry))


def _config_digest(session: RemoteSession, chat: AgentChat) -> str:
    """What the chat's container must have been made from; kept on it as a label, so a change
    in the desired state is seen in the listing alone."""
    made_from = [chat.image, chat.command, session.options.agent_chat_network]
    return hashlib.sha256(json.dumps(made_from).encode()).hexdigest()[:16]


def _labels(session: RemoteSession, chat: AgentChat, config: str) -> dict[str, str]:
    labels = our_labels(session.marquee.name, playground=chat.playground, agent_chat=chat.name)
    return {**labels, CONFIG: config, FENCE: str(session.fence)}


process_agent_chats = ProcessAgentChats()
