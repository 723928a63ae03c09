"""The desired state's model: which Marquees exist, and what should run on each of them.

Every model is frozen and rejects unknown fields: a typo in the inventory is an error at load time,
never a silently ignored key. Values that end up in remote commands (branches, remote paths, image
references, git URLs) are restricted to shell-inert characters, so a hostile or careless inventory
cannot inject commands. The sources (``yaml_source``, ``postgres.source``) build an ``Inventory``;
the engine reads it through the protocol in ``source``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import reprlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from functools import cached_property
from itertools import chain, islice
from operator import attrgetter
from typing import Annotated, Any, Literal, NamedTuple, Self, cast, get_args

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from playguard_async.cycle_record import DesiredVersion
from playguard_async.desired_state.fields import (
    Branch,
    EnvVarName,
    HomeOrAbsolutePath,
    Host,
    ImageReference,
    LocalPath,
    Name,
    RemoteAbsolutePath,
    RepoRelativePath,
    Server,
)
from playguard_async.desired_state.git_url import CredentialsInUrl, GitUrl
from playguard_async.desired_state.rollout_policy import RolloutPolicy
from playguard_async.desired_state.windows import Window
from playguard_async.kits.files import FileRefused, read_text_limited
from playguard_async.kits.image_reference import normalized

SHOWN_PROBLEMS = 20
"""Problems of an ``InventoryError`` shown to a person; the rest are counted."""

KEPT_PROBLEMS = 1000
"""Problems of a refused inventory file that are located and listed; past it they are counted
(field errors) or left for the next read (names repeated, references to no entry)."""

VALIDATION_SLICE = 100
"""Entries of a list validated in one call. pydantic holds the interpreter lock for a whole call,
and entries that reach no validator of ours (``- {}`` 200,000 times, 1 MB) held it, and so the
event loop, for 1.6 s in one (bench/README.md: desired-state stall)."""


class InventoryError(ValueError):
    """The inventory cannot be used; one line per problem, naming file, line, place and reason."""

    def __init__(self, *problems: str, unlisted: int = 0) -> None:
        # A parser's message may span lines; each problem stays one line all the same.
        problems = tuple(re.sub(r"\s*[\r\n]+\s*", " ", problem) for problem in problems)
        super().__init__("\n".join(problems))
        self.problems = problems
        self.unlisted = unlisted
        """Problems found and counted past ``KEPT_PROBLEMS``, not listed."""

    @property
    def count(self) -> int:
        return len(self.problems) + self.unlisted

    def summary(self, shown: int = SHOWN_PROBLEMS) -> str:
        """The first ``shown`` problems and how many more: what a person reads (``check``,
        start-up, the log). A document can hold 10,000 errors; the first ones name the fix."""
        more = self.count - shown
        lines = [*self.problems[:shown], *([f"... and {more} more errors"] if more > 0 else [])]
        return "\n".join(lines)


class DesiredStateUnavailable(InventoryError):
    """The source cannot give a desired state now (a database out of reach) and has none to keep:
    not a configuration error. The engine runs no cycles until it has one and asks again every
    tick, rather than stopping."""


# A place in the document, as pydantic reports it: ("marquees", 1, "name").
_Loc = tuple[str | int, ...]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Named(_Model):
    name: Name


Mode = Literal["apply", "detect", "off"]
"""How the engine steers a Marquee: ``apply`` changes the host to match the desired state;
``detect`` runs every cycle as a dry run under the lock (drift is found, recorded and told, the
host is left as it is); ``off`` runs no cycle on it at all."""


def _json_column(value: object, what: str) -> object:
    """A jsonb column's value as the database gives it (its JSON text), for a before-validator.
    jsonb nests far deeper than Python's parser recurses: such a document is refused as a value,
    so it takes out its row alone, not the whole snapshot's validation. Text from the YAML file
    that is not JSON is refused as text."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except RecursionError:
        raise ValueError(f"{what}; this JSON nests too deeply to be one") from None
    except ValueError:
        raise ValueError(f"{what}, not text") from None


class Marquee(_Named):
    """A Docker host reached over SSH; `launchable` False takes it out of rotation: no cycle runs
    on it, so nothing there is changed, until it is set back to True. ``mode`` steers what its
    cycles may do (``Mode``)."""

    host: Host
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    user: Annotated[str, Field(min_length=1)]
    identity_file: LocalPath
    known_hosts: LocalPath
    docker_socket: RemoteAbsolutePath = "/var/run/docker.sock"
    workdir: RemoteAbsolutePath = "/srv/playguard"
    state_dir: HomeOrAbsolutePath | None = None
    """Where the host keeps this Marquee's fence, host lock and journal of accepted writes; by
    default ``~/.local/state/playguard/<name>`` of the SSH user. It must survive reboots."""
    launchable: bool = True
    mode: Mode = "apply"
    canary: bool = False
    """Admitted in the first wave of every rollout (``desired_state.rollout_policy``)."""
    windows: list[Window] | None = None
    """Maintenance windows (``desired_state.windows``); None: the fleet's default (the
    ``windows`` setting). Outside what they allow, a cycle runs as ``detect``."""

    @field_validator("windows", mode="before")
    @classmethod
    def _windows_from_json(cls, value: object) -> object:
        return _json_column(value, "maintenance windows are a list of windows")

    @property
    def runs_cycles(self) -> bool:
        """Whether the engine runs cycles on it: launchable, and its mode is not ``off``."""
        return self.launchable and self.mode != "off"


class MarqueeListing(NamedTuple):
    """A Marquee as a listing of the fleet shows it (the web view's rows): what a replica keeps
    of a Marquee outside its share, whose full records it does not hold (``Inventory.listed``),
    and the rollout cohorts it is in, so every replica sizes a rollout's waves alike."""

    name: str
    launchable: bool
    mode: Mode
    canary: bool = False
    cohorts: tuple[tuple[str, str], ...] = ()
    """(playspec, branch) of each of its running Playgrounds, when it runs in ``apply`` mode."""


class CohortMember(NamedTuple):
    """A Marquee a rollout may admit (``Inventory.cohort``)."""

    name: str
    canary: bool


_Cohorts = dict[tuple[str, str], tuple[CohortMember, ...]]


PASSWORD_FILE_LIMIT = 64 << 10
"""Bytes a registry password file may have."""


class Registry(_Named):
    """An image registry; the model holds where the password is, never the password itself."""

    server: Server
    username: Annotated[str, Field(min_length=1)]
    password_file: LocalPath | None = None
    password_env: EnvVarName | None = None

    @model_validator(mode="after")
    def _exactly_one_password_source(self) -> Self:
        if (self.password_file is None) == (self.password_env is None):
            raise ValueError("set exactly one of password_file and password_env")
        return self

    def password(self) -> SecretStr:
        """Read the password now, so a rotated secret is picked up without reloading the
        inventory; raises InventoryError naming the registry and the source, never the value."""
        if self.password_file is not None:
            source = f"password file {self.password_file}"
            try:
                value = read_text_limited(self.password_file, PASSWORD_FILE_LIMIT).strip()
            except FileRefused as exc:
                raise InventoryError(
                    f"registry {self.name!r}: cannot read {source}: {exc.reason}"
                ) from None
        else:
            assert self.password_env is not None  # guaranteed by _exactly_one_password_source
            source = f"environment variable {self.password_env}"
            value = os.environ.get(self.password_env, "").strip()
        if not value:
            raise InventoryError(f"registry {self.name!r}: {source} is missing or empty")
        return SecretStr(value)


HEALTH_TIMEOUT_MAX = 3600.0
"""Seconds a Playspec's ``health_timeout`` may be at most: the wait happens inside a lease."""


class Playspec(_Named):
    """What a playground runs: a repo with a compose file, and the images it pulls; how long a
    (re)created Playground may take to become healthy, and what is done when it does not
    (``rollback``: ``off`` reports, ``notify`` reports and notifies once, ``auto`` also goes back
    to the last good state)."""

    repo: GitUrl
    compose_file: RepoRelativePath = "compose.yaml"
    images: list[ImageReference] = Field(default_factory=list)
    registry: Name | None = None
    rollback: Literal["off", "notify", "auto"] = "notify"
    health_timeout: Annotated[float, Field(gt=0, le=HEALTH_TIMEOUT_MAX, allow_inf_nan=False)] = 60.0
    rollout: RolloutPolicy | None = None
    """How a release of it reaches the fleet (``desired_state.rollout_policy``); None: the
    fleet's default (the ``rollout`` setting), and with none there, every Marquee at once."""

    @field_validator("rollout", mode="before")
    @classmethod
    def _rollout_from_json(cls, value: object) -> object:
        return _json_column(
            value, "a rollout is a mapping of waves, bake, max_failures and wave_timeout"
        )


class Playground(_Named):
    """One checkout of a playspec at a branch, on one marquee."""

    playspec: Name
    marquee: Name
    branch: Branch
    state: Literal["running", "stopped"] = "running"
    expires_at: AwareDatetime | None = None
    stop_when_branch_gone: bool = False


class AgentChat(_Named):
    """An agent container attached to a playground, and so living on that playground's marquee."""

    playground: Name
    image: ImageReference
    command: list[str]
    state: Literal["active", "closed"] = "active"


# (list, field, list it must name an entry of); None means "no reference".
REFERENCES = (
    ("playspecs", "registry", "registries"),
    ("playgrounds", "playspec", "playspecs"),
    ("playgrounds", "marquee", "marquees"),
    ("agent_chats", "playground", "playgrounds"),
)


def _problem(loc: _Loc, kind: str, reason: str, value: str) -> InitErrorDetails:
    """A cross-list problem in the same shape as a field error, so it is reported the same way."""
    return InitErrorDetails(type=PydanticCustomError(kind, reason), loc=loc, input=value)


_NAME_OF = attrgetter("name")


class Inventory(_Model):
    """The whole desired state; names are unique per list and every reference resolves."""

    marquees: list[Marquee] = Field(default_factory=list)
    registries: list[Registry] = Field(default_factory=list)
    playspecs: list[Playspec] = Field(default_factory=list)
    playgrounds: list[Playground] = Field(default_factory=list)
    agent_chats: list[AgentChat] = Field(default_factory=list)
    _elsewhere: tuple[MarqueeListing, ...] = PrivateAttr(default=())
    """The Marquees of other replicas' shares, when this inventory was read for a share
    (``NarrowDesiredState.set_share``): listed, their records not held."""
    _elsewhere_cohorts: tuple[tuple[MarqueeListing, ...], _Cohorts] | None = PrivateAttr(None)
    """``_elsewhere`` and the cohorts it lists, computed at the first ``cohort`` after it was
    set: the source sets it after the index is built, and anew on an unchanged inventory."""
    _version: DesiredVersion | None = PrivateAttr(None)
    """Which desired state this is, as its source read it (a file's digest, the change log's
    highest id); each cycle's record names it. None: the source does not say (a narrow read)."""
    _fleet: Inventory | None = PrivateAttr(None)
    """For a wake-up's narrow read (a few Marquees' rows), the whole inventory in force when it
    was read: what ``cohort`` answers from, as a rollout's waves are the fleet's."""

    @property
    def version(self) -> DesiredVersion | None:
        return self._version

    def __eq__(self, other: object) -> bool:
        """Equal content, whichever read gave it: the ``version`` a source noted is no part of
        what an inventory holds (two files of one content are one desired state)."""
        if not isinstance(other, Inventory) or self._version == other._version:
            return super().__eq__(other)
        twin = other.model_copy()
        twin._version = self._version
        return super().__eq__(twin)

    __hash__ = None  # type: ignore[assignment]  # unhashable, as every pydantic model

    @field_validator("*", mode="before")
    @classmethod
    def _null_is_empty(cls, value: object) -> object:
        """`marquees:` with every entry commented out reads as null; treat it as an empty list."""
        return [] if value is None else value

    @model_validator(mode="after")
    def _names_unique_and_references_resolve(self) -> Self:
        # Raised as a ValidationError so each problem keeps its own place (loc), like field errors.
        problems = list(
            islice(chain(self._duplicate_names(), self._unresolved_references()), KEPT_PROBLEMS)
        )
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    def _lists(self) -> dict[str, list[_Named]]:
        return {field: getattr(self, field) for field in type(self).model_fields}

    def _duplicate_names(self) -> Iterator[InitErrorDetails]:
        for field, items in self._lists().items():
            if len(set(map(_NAME_OF, items))) == len(items):
                continue  # every name once, the common case, found without a loop of ours
            first_index: dict[str, int] = {}
            for index, item in enumerate(items):
                first = first_index.setdefault(item.name, index)
                if first != index:
                    yield _problem(
                        (field, index, "name"),
                        "duplicate_name",
                        f"duplicate name, first used by {field}[{first}]",
                        item.name,
                    )

    def _unresolved_references(self) -> Iterator[InitErrorDetails]:
        lists = self._lists()
        names = {field: set(map(_NAME_OF, items)) for field, items in lists.items()}
        for source, field, target in REFERENCES:
            references = set(map(attrgetter(field), lists[source]))
            references.discard(None)
            if references <= names[target]:
                continue  # every reference resolves (or is absent): nothing to name
            for index, item in enumerate(lists[source]):
                reference = getattr(item, field)
                if reference is not None and reference not in names[target]:
                    yield _problem(
                        (source, index, field),
                        "unresolved_reference",
                        f"no entry in {target} has this name",
                        reference,
                    )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy that builds its own indexes: pydantic copies cached properties along with the
        fields, and the original's index would answer for the copy's lists."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("_index", None)
        return copied

    @cached_property
    def _index(self) -> _InventoryIndex:
        return _InventoryIndex.of(self)

    def listed(self) -> list[MarqueeListing]:
        """Every Marquee of the desired state, those outside the share it was read for
        included, in name order when there are such (the database's order), else in its own."""
        held = list(self._index.listings)
        if not self._elsewhere:
            return held
        return sorted([*held, *self._elsewhere])

    def launchable_marquees(self) -> list[Marquee]:
        """Marquees that may receive new playgrounds and chats."""
        return [marquee for marquee in self.marquees if marquee.launchable]

    def cycled_marquees(self) -> list[Marquee]:
        """Marquees the engine runs cycles on (``Marquee.runs_cycles``)."""
        return [marquee for marquee in self.marquees if marquee.runs_cycles]

    def marquee(self, name: str) -> Marquee:
        """The marquee called `name`; KeyError if the inventory has none."""
        try:
            return self._index.marquees[name]
        except KeyError:
            raise KeyError(f"no marquee named {name!r} in the inventory") from None

    def playgrounds_on(self, marquee: str) -> list[Playground]:
        """Playgrounds that should exist on `marquee` (empty for an unknown one: nothing wanted)."""
        return list(self._index.playgrounds_on.get(marquee, ()))

    def agent_chats_on(self, marquee: str) -> list[AgentChat]:
        """Agent chats whose playground lives on `marquee`."""
        return list(self._index.agent_chats_on.get(marquee, ()))

    def playspec_of(self, playground: Playground) -> Playspec:
        """The playground's playspec (validation guarantees the reference resolves)."""
        return self._index.playspecs[playground.playspec]

    def registry_of(self, playspec: Playspec) -> Registry | None:
        """The registry the playspec pulls from, if it names one."""
        if playspec.registry is None:
            return None
        return self._index.registries[playspec.registry]

    def playground_of(self, chat: AgentChat) -> Playground:
        """The playground the agent chat is attached to."""
        return self._index.playgrounds[chat.playground]

    def images_on(self, marquee: str) -> dict[str, Registry | None]:
        """Each image the playgrounds on `marquee` need, with its playspec's registry; an image in
        several playspecs appears once, however each spells it (``kits.image_reference``),
        under the first one's spelling and with its registry."""
        images: dict[str, Registry | None] = {}
        listed: set[str] = set()
        for playground in self._index.playgrounds_on.get(marquee, ()):
            playspec = self.playspec_of(playground)
            for image in playspec.images:
                same = normalized(image) or image
                if same not in listed:
                    listed.add(same)
                    images[image] = self.registry_of(playspec)
        return images

    def registries_on(self, marquee: str) -> list[Registry]:
        """The registries the playgrounds on `marquee` pull from, each once, in inventory order."""
        used = {
            registry.name: registry
            for playground in self._index.playgrounds_on.get(marquee, ())
            if (registry := self.registry_of(self.playspec_of(playground))) is not None
        }
        order = self._index.registry_order
        return sorted(used.values(), key=lambda registry: order[registry.name])

    def cohort(self, playspec: str, branch: str) -> tuple[CohortMember, ...]:
        """The Marquees a release of ``playspec`` at ``branch`` would change: those with a
        running Playground of it that this replica's cycles may change (``apply`` mode), in
        name order. Marquees of other replicas' shares are in it when the source listed them
        with their cohorts (``MarqueeListing.cohorts``). A narrow read answers from the whole
        inventory it was read beside (``cohorts_from``). The index's own tuple when it can:
        every cycle of a staged Playground asks its size (a copy of 10,000 cost 30 µs)."""
        if self._fleet is not None:
            return self._fleet.cohort(playspec, branch)
        held = self._index.cohorts.get((playspec, branch), ())
        elsewhere = self._cohorts_elsewhere().get((playspec, branch), ())
        return tuple(sorted((*held, *elsewhere))) if elsewhere else held

    def cohorts_from(self, whole: Inventory) -> None:
        """Answer ``cohort`` from ``whole`` (this inventory holds a few Marquees' rows only)."""
        self._fleet = whole._fleet or whole

    def _cohorts_elsewhere(self) -> _Cohorts:
        known = self._elsewhere_cohorts
        if known is None or known[0] is not self._elsewhere:
            known = self._elsewhere_cohorts = (self._elsewhere, _cohorts_of(self._elsewhere))
        return known[1]

    def wants_playground(self, marquee: str, name: str) -> bool:
        """Whether the playground called `name` should exist on `marquee`."""
        playground = self._index.playgrounds.get(name)
        return playground is not None and playground.marquee == marquee

    def wants_agent_chat(self, marquee: str, name: str) -> bool:
        """Whether the agent chat called `name` is one of `marquee`'s (active or closed)."""
        chat = self._index.agent_chats.get(name)
        return chat is not None and self.playground_of(chat).marquee == marquee


_ENTRY_MODELS: dict[str, type[_Named]] = {
    field: get_args(info.annotation)[0] for field, info in Inventory.model_fields.items()
}
_ENTRY_LISTS: dict[str, TypeAdapter[list[_Named]]] = {
    field: TypeAdapter(cast(Any, info.annotation)) for field, info in Inventory.model_fields.items()
}


def _entries_checked(
    document: object, context: dict[str, Any]
) -> tuple[object, list[ErrorDetails], int]:
    """``document`` with each list's entries validated ``VALIDATION_SLICE`` at a time (models in
    place of mappings, which the ``Inventory`` then takes as they are); the problems found,
    located, at most about ``KEPT_PROBLEMS`` of them; and how many there are in all.

    A slice that fails is validated again an entry at a time while there is room for its
    problems, so no call builds more of them than one entry has (its lists are bounded too).
    Unknown top-level keys past ``KEPT_PROBLEMS`` are counted and dropped. Anything but a
    mapping, or a list field that is not a list, is left to the model to refuse."""
    if not isinstance(document, dict):
        return document, [], 0
    checked, kept, count = dict(document), list[ErrorDetails](), 0
    for field, model in _ENTRY_MODELS.items():
        items = document.get(field)
        if not isinstance(items, list):
            continue
        models: list[_Named] = []
        for start in range(0, len(items), VALIDATION_SLICE):
            part = items[start : start + VALIDATION_SLICE]
            try:
                models += _ENTRY_LISTS[field].validate_python(part, context=context)
                continue
            except ValidationError as exc:
                count += exc.error_count()
            for offset, entry in enumerate(part):
                if len(kept) >= KEPT_PROBLEMS:
                    break
                try:
                    model.model_validate(entry, context=context)
                except ValidationError as exc:
                    kept += (
                        cast(ErrorDetails, {**error, "loc": (field, start + offset, *error["loc"])})
                        for error in exc.errors(include_url=False)
                    )
        checked[field] = models
    unknown = [key for key in document if key not in _ENTRY_MODELS][KEPT_PROBLEMS:]
    for key in unknown:
        del checked[key]
    return checked, kept, count + len(unknown)


@dataclass(frozen=True)
class _InventoryIndex:
    """An inventory's lookups, built in one pass over its lists the first time one is asked.

    A cycle asks its questions about its own Marquee; with the index they cost what that Marquee
    holds, where a scan of the lists would cost the whole fleet in every cycle. The inventory is
    frozen, so the index never goes stale; a new inventory (the file changed) builds its own.
    """

    marquees: dict[str, Marquee]
    registries: dict[str, Registry]
    registry_order: dict[str, int]
    playspecs: dict[str, Playspec]
    playgrounds: dict[str, Playground]
    agent_chats: dict[str, AgentChat]
    playgrounds_on: dict[str, tuple[Playground, ...]]
    agent_chats_on: dict[str, tuple[AgentChat, ...]]
    listings: tuple[MarqueeListing, ...]
    cohorts: _Cohorts

    @classmethod
    def of(cls, inventory: Inventory) -> _InventoryIndex:
        playgrounds = {playground.name: playground for playground in inventory.playgrounds}
        playgrounds_on: defaultdict[str, list[Playground]] = defaultdict(list)
        for playground in inventory.playgrounds:
            playgrounds_on[playground.marquee].append(playground)
        agent_chats_on: defaultdict[str, list[AgentChat]] = defaultdict(list)
        for chat in inventory.agent_chats:
            agent_chats_on[playgrounds[chat.playground].marquee].append(chat)
        listings = _listings(inventory.marquees, playgrounds_on)
        return cls(
            marquees={marquee.name: marquee for marquee in inventory.marquees},
            registries={registry.name: registry for registry in inventory.registries},
            registry_order={
                registry.name: position for position, registry in enumerate(inventory.registries)
            },
            playspecs={playspec.name: playspec for playspec in inventory.playspecs},
            playgrounds=playgrounds,
            agent_chats={chat.name: chat for chat in inventory.agent_chats},
            playgrounds_on={name: tuple(found) for name, found in playgrounds_on.items()},
            agent_chats_on={name: tuple(found) for name, found in agent_chats_on.items()},
            listings=listings,
            cohorts=_cohorts_of(listings),
        )


def _listings(
    marquees: Iterable[Marquee], playgrounds_on: Mapping[str, Sequence[Playground]]
) -> tuple[MarqueeListing, ...]:
    """Each Marquee as listed (``Inventory.listed``), its cohorts those of its running
    Playgrounds when its cycles may change them (launchable, ``apply`` mode): what the
    PostgreSQL source lists of a Marquee outside the share, so both read alike."""
    listings = []
    for marquee in marquees:
        cohorts: tuple[tuple[str, str], ...] = ()
        if marquee.runs_cycles and marquee.mode == "apply":
            running = playgrounds_on.get(marquee.name, ())
            cohorts = tuple(
                sorted({(p.playspec, p.branch) for p in running if p.state == "running"})
            )
        listings.append(
            MarqueeListing(marquee.name, marquee.launchable, marquee.mode, marquee.canary, cohorts)
        )
    return tuple(listings)


def _cohorts_of(listings: Iterable[MarqueeListing]) -> _Cohorts:
    """(playspec, branch) -> the Marquees a release of it would change (``Inventory.cohort``)."""
    members: defaultdict[tuple[str, str], list[CohortMember]] = defaultdict(list)
    for listing in listings:
        for scope in listing.cohorts:
            members[scope].append(CohortMember(listing.name, listing.canary))
    return {scope: tuple(sorted(found)) for scope, found in members.items()}


_VALUE_REPR = reprlib.Repr()
_VALUE_REPR.maxstring = 80


def _place(loc: _Loc) -> str:
    """('marquees', 1, 'name') -> 'marquees[1].name'; a key that is not a plain name (an unknown
    key can be anything) is shown quoted and bounded."""
    return (
        "".join(
            f"[{part}]"
            if isinstance(part, int)
            else f".{part}"
            if re.fullmatch(r"\w{1,64}", part)
            else f"[{_VALUE_REPR.repr(part)}]"
            for part in loc
        ).lstrip(".")
        or "(top level)"
    )


def _shown_value(error: ErrorDetails) -> str:
    """The offending scalar, for the reader to find; an unknown key's value is never shown, as it
    may be a secret typed into the wrong field (`password: ...`), nor a URL refused for the
    credentials it holds."""
    value = error["input"]
    if (
        error["type"] == "extra_forbidden"
        or isinstance(error.get("ctx", {}).get("error"), CredentialsInUrl)
        or not isinstance(value, str | int | float | date | None)
    ):
        return ""
    return f" (value {_VALUE_REPR.repr(value.isoformat() if isinstance(value, date) else value)})"


def _reason(error: ErrorDetails) -> str:
    """Our own validators raise ValueError; show their message without pydantic's prefix."""
    if error["type"] == "value_error":
        return str(error.get("ctx", {})["error"])
    return error["msg"]


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector while a document is parsed, validated and indexed.

    A large inventory allocates hundreds of thousands of nodes at once, none of them in a
    reference cycle (refcounting frees the tree), yet each allocation burst starts collections
    that walk everything alive: two thirds of a 10,000-Marquee parse. Process-wide, but for one
    read only (one at a time), and left off if someone else turned it off.

    What the read made and still holds (the new state, or a refused document's 50,000 errors
    on their way up) is frozen (``gc.freeze``) before the collector is back: else the first young
    collection walks all of it at once, holding every thread, the loop's too, for 90 ms
    (bench/README.md: desired-state stall). ``settle_new_desired_state`` unfreezes it with the
    next change, so garbage among it is collected then.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.enable()
