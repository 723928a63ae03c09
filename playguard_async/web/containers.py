"""What runs where on a Marquee's page: its containers as the last cycles saw them, grouped by
Playground and agent chat, each said to match the desired state or not and why; and, for a
Playground that is not in sync, its desired parts against what runs.

Everything here comes from the story (``MarqueeStory``): the listing a cycle kept in Redis
(``coordination.containers_seen``, read and checked there), what the desired state asks now
(``wanted``), and the last cycle's findings (``revisions``, its drift: the words ``plan --json``
gives, from the same record). No page view asks a host anything. The values are outside input:
the template autoescapes them, and what is judged here is compared, never interpreted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from playguard_async.coordination.containers_seen import (
    ContainersSeen,
    DesiredParts,
    SeenContainer,
)
from playguard_async.coordination.marquee_reads import (
    MarqueeStory,
    PlaygroundRevisions,
    WantedPlayground,
)
from playguard_async.kits.image_reference import normalized, same_image

ABSENT = "-"
"""How a file digest or an image says the host has none (``remote.host_state``)."""

OTHERS = "Not in the desired state"


@dataclass(frozen=True)
class ContainerRow:
    """One container as the page lists it, with its verdict."""

    seen: SeenContainer
    matches: bool | None
    """True: as desired; False: not (``why`` says how); None: held, judged by its hold."""
    why: str = ""


@dataclass(frozen=True)
class ContainerGroup:
    """The containers of one Playground, of one agent chat, or of nothing desired now."""

    title: str
    anchor: str
    rows: list[ContainerRow]


@dataclass(frozen=True)
class DiffRow:
    """One part of a Playground desired against what runs."""

    part: str
    desired: str
    running: str
    same: bool | None
    """None: one side is not known."""


@dataclass(frozen=True)
class PlaygroundDiff:
    playground: str
    rows: list[DiffRow]
    drift: list[str] = field(default_factory=list)
    """Why the last cycle changed it, or in a dry run would: the plan's words."""


@dataclass(frozen=True)
class RunsWhere:
    """The page's "What runs where" section."""

    seen: ContainersSeen | None
    unreadable: str | None
    groups: list[ContainerGroup]
    diffs: dict[str, PlaygroundDiff]


def runs_where(story: MarqueeStory) -> RunsWhere:
    """The section from ``story`` (one whose ``seen`` was not read shows as never seen)."""
    read = story.seen
    seen = None if read is None else read.seen
    unreadable = None if read is None else read.unreadable
    if seen is None:
        return RunsWhere(None, unreadable, [], {})
    groups = _groups(story, seen)
    diffs = {}
    for want in story.wanted:
        diff = _diff(story, want, seen, groups)
        if diff is not None:
            diffs[want.name] = diff
    return RunsWhere(seen, unreadable, groups, diffs)


def _groups(story: MarqueeStory, seen: ContainersSeen) -> list[ContainerGroup]:
    wanted = {want.name: want for want in story.wanted}
    chats = {chat[0]: chat for want in story.wanted for chat in want.chats}
    by_title: dict[str, ContainerGroup] = {}
    for want in story.wanted:  # each desired one listed, with its containers or none
        by_title[f"Playground {want.name}"] = ContainerGroup(
            f"Playground {want.name}", f"runs-{want.name}", []
        )
        for chat in want.chats:
            title = f"Agent chat {chat[0]}"
            by_title[title] = ContainerGroup(title, f"runs-chat-{chat[0]}", [])
    others = ContainerGroup(OTHERS, "runs-others", [])
    for container in seen.containers:
        if container.agent_chat is not None:
            title = f"Agent chat {container.agent_chat}"
            group = by_title.setdefault(
                title, ContainerGroup(title, f"runs-chat-{container.agent_chat}", [])
            )
            row = _chat_row(container, chats.get(container.agent_chat))
        elif container.playground in wanted:
            want = wanted[container.playground]
            group = by_title[f"Playground {want.name}"]
            desired = seen.desired.get(want.name)
            row = _playground_row(container, want, desired, story.revisions.get(want.name))
        else:
            group, row = others, ContainerRow(container, False, "not in the desired state")
        group.rows.append(row)
    return [*by_title.values(), *([others] if others.rows else [])]


def _chat_row(container: SeenContainer, chat: tuple[str, str, str] | None) -> ContainerRow:
    """An agent chat's container runs once (``phases.process_agent_chats``): an exited one is
    a finished chat, left in place; a closed chat's is removed."""
    if chat is None:
        return ContainerRow(container, False, "no such agent chat in the desired state")
    _, image, state = chat
    if state != "active":
        return ContainerRow(container, False, f"the chat is {state}: its container goes")
    if not same_image(container.image, image):
        return ContainerRow(container, False, f"runs {container.image}, desired {image}")
    if container.state in ("exited", "dead"):
        return ContainerRow(container, True, "finished (left in place, never restarted)")
    return _judged_state(container) or ContainerRow(container, True)


def _playground_row(
    container: SeenContainer,
    want: WantedPlayground,
    desired: DesiredParts | None,
    told: PlaygroundRevisions | None,
) -> ContainerRow:
    if want.state != "running":
        if container.state in ("running", "restarting", "paused"):
            return ContainerRow(container, False, f"up, but asked to be {want.state}")
        return ContainerRow(container, True)
    wrong = _judged_state(container)
    if wrong is not None:
        return wrong
    services = None if desired is None else desired.services
    if services is not None and container.service not in services:
        return ContainerRow(container, False, "its service is not in the compose file")
    definition = None if desired is None else desired.definitions.get(container.service)
    if definition and container.config_hash and definition != container.config_hash:
        why = "its service definition changed (compose file, .env or override)"
        return ContainerRow(container, False, why)
    if told is not None and told.hold:
        return ContainerRow(container, None, f"held: {told.hold}")
    behind = None if desired is None else _behind(desired, container.image)
    if behind is not None and behind != container.image_id:
        return ContainerRow(
            container, False, f"{container.image} names another image now ({_short(behind)})"
        )
    return ContainerRow(container, True)


def _judged_state(container: SeenContainer) -> ContainerRow | None:
    """A row saying what is wrong with the container's state or health, if anything is."""
    if container.state != "running":
        return ContainerRow(container, False, container.state or "no state")
    if container.health == "unhealthy":
        return ContainerRow(container, False, "unhealthy")
    return None


def _diff(
    story: MarqueeStory, want: WantedPlayground, seen: ContainersSeen, groups: list[ContainerGroup]
) -> PlaygroundDiff | None:
    """``want`` desired against what runs, when it is not in sync (drift, a hold, a container
    that does not match); None when it is."""
    last = story.last
    drift = [] if last is None else list(last.drift.get(want.name, []))
    told = story.revisions.get(want.name)
    rows = [row for group in groups if group.anchor == f"runs-{want.name}" for row in group.rows]
    desired = seen.desired.get(want.name)
    services = _service_rows(desired, rows) if desired is not None else []
    env = _env_row(None if desired is None else desired.env, told)
    in_sync = not drift and not (told and told.hold) and all(row.matches for row in rows)
    if in_sync and all(row.same for row in services) and env.same is not False:
        return None
    return PlaygroundDiff(want.name, [*services, env], drift)


def _service_rows(desired: DesiredParts, rows: Sequence[ContainerRow]) -> list[DiffRow]:
    """A row per service of the compose file and per service a container runs for."""
    wanted = desired.services or []
    running = sorted({row.seen.service for row in rows} - set(wanted))
    diff = []
    for service in [*wanted, *running]:
        own = [row for row in rows if row.seen.service == service]
        images = sorted({_image_shown(row.seen, desired) for row in own})
        want = "in the compose file" if service in wanted else "not in the compose file"
        if service in desired.definitions:
            want += f", definition {desired.definitions[service]}"
        if service in wanted and own:
            want += f"; {', '.join(images)}"
        ran = "; ".join(_container_shown(row.seen) for row in own)
        same = service in wanted and bool(own) and all(row.matches is not False for row in own)
        diff.append(DiffRow(f"service {service}", want, ran or "no container", same))
    return diff


def _image_shown(container: SeenContainer, desired: DesiredParts) -> str:
    behind = _behind(desired, container.image)
    if behind is None:
        return container.image
    return f"{container.image} = {_short(behind)}" if behind != ABSENT else f"{container.image}"


def _behind(desired: DesiredParts, image: str) -> str | None:
    """The image the cycle found behind the Playspec's reference that names ``image`` (however
    either is spelt: ``kits.image_reference``); None when none does."""
    wanted = normalized(image)
    if wanted is None:
        return None
    return next(
        (found for reference, found in desired.images.items() if normalized(reference) == wanted),
        None,
    )


def _container_shown(container: SeenContainer) -> str:
    health = f", {container.health}" if container.health else ""
    shown = f"{container.name} ({container.state}{health}, {_short(container.image_id)})"
    definition = f", definition {container.config_hash}" if container.config_hash else ""
    return f"{shown} {container.image}{definition}"


def _env_row(desired: str | None, told: PlaygroundRevisions | None) -> DiffRow:
    """The ``.env`` by its digest (never its content): as the checkout has it, against the
    revision the Playground was last found running, else its last good one (said so)."""
    running, label = None, ""
    if told is not None and told.running is not None:
        running = told.running.get("env")
    elif told is not None and told.last_good is not None:
        running, label = told.last_good.get("env"), " (its last good revision)"
    want = "not known" if desired is None else _digest_shown(desired)
    if not isinstance(running, str) or desired is None:
        return DiffRow(".env", want, "not known", None)
    return DiffRow(".env", want, _digest_shown(running) + label, running == desired)


def _digest_shown(digest: str) -> str:
    return "absent" if digest == ABSENT else f"sha256:{digest[:12]}"


def utc_time(seconds: float) -> str:
    """A wall-clock time (Unix seconds, from Redis: any float) as people read it, in UTC."""
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return "?"


def started_shown(started_at: str | None) -> str:
    """Docker's start time (RFC 3339, nanoseconds) to the second, in UTC; as it is otherwise."""
    if started_at is None:
        return "?"
    try:
        started = datetime.fromisoformat(started_at[:19]).replace(tzinfo=UTC)
    except ValueError:
        return started_at
    if started.year == 1:  # Docker's zero time: created, never started
        return "never"
    return started.strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(image_id: str) -> str:
    """An image ID as people read it: its first 12 hex digits."""
    return image_id.removeprefix("sha256:")[:12] if image_id != ABSENT else "none on the host"
