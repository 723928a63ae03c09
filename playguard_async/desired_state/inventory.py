"""The desired state: which Marquees exist, and what should run on each of them.

The engine reads the inventory only through the `DesiredState` protocol, so a database or an HTTP
API can replace the YAML file without touching the reconcilers. Every model is frozen and rejects
unknown fields: a typo in the inventory is an error at load time, never a silently ignored key.
Values that end up in remote commands (branches, remote paths, image references, git URLs) are
restricted to shell-inert characters, so a hostile or careless inventory cannot inject commands.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import ipaddress
import json
import os
import re
import reprlib
import threading
import time
from collections import defaultdict
from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Hashable,
    Iterable,
    Iterator,
    Mapping,
)
from dataclasses import dataclass
from datetime import date
from functools import cached_property
from itertools import chain, islice
from operator import attrgetter
from pathlib import Path
from typing import (
    Annotated,
    Any,
    Literal,
    NamedTuple,
    Protocol,
    Self,
    cast,
    get_args,
    runtime_checkable,
)

import yaml
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from playguard_async.cycle_record import CycleRecord
from playguard_async.desired_state.windows import Window
from playguard_async.kits.aio import in_thread
from playguard_async.kits.files import FileRefused, read_limited, read_text_limited, signature_of

try:  # libyaml: faster (bench/README.md), and it refuses nesting past 1,000 levels itself
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]


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

# Validation context key: the directory that relative local paths are resolved against.
_BASE_DIR = "base_dir"


def _matching(pattern: str, reason: str) -> Callable[[str], str]:
    """Build a validator that accepts exactly the strings fully matching `pattern`."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(reason)
        return value

    return check


_SAFE_CHARS = "[A-Za-z0-9._/-]+"
_check_safe_chars = _matching(
    _SAFE_CHARS, "may only contain letters, digits, '.', '_', '/' and '-'"
)

Name = Annotated[
    str,
    AfterValidator(
        _matching(
            "[a-z0-9][a-z0-9-]{0,62}",
            "must be 1-63 lowercase letters, digits or '-', starting with a letter or digit",
        )
    ),
]

# git check-ref-format rules that the character set above does not already exclude (control
# characters, space, ~ ^ : ? * [ \ and "@{" / "@" all fall outside it).
_BRANCH_RULES: tuple[tuple[Callable[[str], bool], str], ...] = (
    (lambda branch: branch.startswith("-"), "must not start with '-'"),
    (lambda branch: ".." in branch, "must not contain '..'"),
    (lambda branch: branch.endswith("."), "must not end with '.'"),
    (
        lambda branch: "" in branch.split("/"),
        "must not start or end with '/' nor contain '//'",
    ),
    (
        lambda branch: any(part.startswith(".") for part in branch.split("/")),
        "no '/'-separated part may start with '.'",
    ),
    (
        lambda branch: any(part.endswith(".lock") for part in branch.split("/")),
        "no '/'-separated part may end with '.lock'",
    ),
)


_VALID_BRANCH = re.compile(
    r"(?!-)(?!.*\.\.)(?!.*\.lock(?:/|$))"
    r"[A-Za-z0-9_-][A-Za-z0-9._-]*(?:/[A-Za-z0-9_-][A-Za-z0-9._-]*)*(?<!\.)"
)
"""Every branch the rules below accept, in one match: the common (valid) case costs one regex;
only a refused branch walks the rules, which name the reason."""


def _check_branch(value: str) -> str:
    """A branch name git accepts that is also inert when pasted into a shell command line."""
    if _VALID_BRANCH.fullmatch(value):
        return value
    _check_safe_chars(value)
    for broken, reason in _BRANCH_RULES:
        if broken(value):
            raise ValueError(reason)
    return value


Branch = Annotated[str, AfterValidator(_check_branch)]


def _remote_path(*, absolute: bool) -> Callable[[str], str]:
    """Build a validator for a path on a Marquee (POSIX), either absolute or relative to a repo."""

    def check(value: str) -> str:
        _check_safe_chars(value)
        if value.startswith("/") != absolute:
            raise ValueError("must be an absolute path" if absolute else "must be a relative path")
        if ".." in value.split("/"):  # as in PurePosixPath(value).parts
            raise ValueError("must not contain '..'")
        return value

    return check


RemoteAbsolutePath = Annotated[str, AfterValidator(_remote_path(absolute=True))]
RepoRelativePath = Annotated[str, AfterValidator(_remote_path(absolute=False))]


def _check_home_or_absolute(value: str) -> str:
    """An absolute path, or one under the SSH user's home written ``~/...`` (expanded there)."""
    if value.startswith("~/"):
        _remote_path(absolute=False)(value.removeprefix("~/"))
        return value
    return _remote_path(absolute=True)(value)


HomeOrAbsolutePath = Annotated[str, AfterValidator(_check_home_or_absolute)]

_HOST_LABEL = "(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_HOSTNAME = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")


def _check_host(value: str) -> str:
    # The hostname pattern first: it is cheap and matches dotted IPv4 addresses too, so
    # ipaddress (ten times the cost) parses only what it cannot accept (IPv6, refusals).
    if len(value) <= 253 and _HOSTNAME.fullmatch(value):
        return value
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError("must be a hostname or an IP address") from None
    return value


Host = Annotated[str, AfterValidator(_check_host)]

_SERVER = re.compile(
    r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]+))(?::(?P<port>[0-9]{1,5}))?"
)


def _check_server(value: str) -> str:
    """host[:port] as Docker names a registry; an IPv6 literal must be bracketed."""
    match = _SERVER.fullmatch(value)
    if match is None:
        raise ValueError("must be host or host:port ([IPv6]:port for an IPv6 address)")
    if match["ipv6"]:
        ipaddress.IPv6Address(match["ipv6"])
    else:
        _check_host(match["host"])
    if match["port"] and not 1 <= int(match["port"]) <= 65535:
        raise ValueError("port must be in 1..65535")
    return value


Server = Annotated[str, AfterValidator(_check_server)]

# scp-like "user@host:path" must not start its path with ':' so that "ext::cmd" (git's command
# transport) is refused; nothing may start with '-' or it would read as an option to git.
GitUrl = Annotated[
    str,
    AfterValidator(
        _matching(
            r"(?:(?:https?|ssh|git|file)://|(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!:))"
            r"[^\s\x00-\x1f\x7f]+",
            "must be a git URL: https://, ssh://, git://, file:// or [user@]host:path",
        )
    ),
]

_IMAGE_PATH_PART = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
ImageReference = Annotated[
    str,
    AfterValidator(
        _matching(
            rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_IMAGE_PATH_PART}(?:/{_IMAGE_PATH_PART})*"
            r"(?::\w[\w.-]{0,127})?(?:@[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,})?",
            "must be an image reference like registry.example:5000/team/app:tag",
        )
    ),
]

EnvVarName = Annotated[
    str,
    AfterValidator(_matching("[A-Za-z_][A-Za-z0-9_]*", "must be an environment variable name")),
]


def _resolve_local_path(value: Path, info: ValidationInfo) -> Path:
    """Make a relative path relative to the inventory file, not to wherever the daemon started."""
    value = value.expanduser()
    if value.is_absolute() or not info.context:
        return value
    base_dir: Path = info.context[_BASE_DIR]
    return base_dir / value


# Validation context key: the local paths one validation has resolved, by the text it was given.
_PATHS_RESOLVED = "paths_resolved"


def _remembered_local_path(
    value: object, resolve: ValidatorFunctionWrapHandler, info: ValidationInfo
) -> Path:
    """Resolve each distinct path text once per validation: ten thousand Marquees name the same
    two key files, and a ``Path`` costs more to make than the rest of a Marquee's checks. A
    ``Path`` is immutable, so Marquees may share one; a text that fails is not remembered, so it
    fails again in every place it appears."""
    paths: dict[str, Path] | None = info.context.get(_PATHS_RESOLVED) if info.context else None
    if paths is None or type(value) is not str:
        return cast(Path, resolve(value))
    path = paths.get(value)
    if path is None:
        path = paths[value] = resolve(value)
    return path


LocalPath = Annotated[
    Path, AfterValidator(_resolve_local_path), WrapValidator(_remembered_local_path)
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Named(_Model):
    name: Name


Mode = Literal["apply", "detect", "off"]
"""How the engine steers a Marquee: ``apply`` changes the host to match the desired state;
``detect`` runs every cycle as a dry run under the lock (drift is found, recorded and told, the
host is left as it is); ``off`` runs no cycle on it at all."""


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
    windows: list[Window] | None = None
    """Maintenance windows (``desired_state.windows``); None: the fleet's default (the
    ``windows`` setting). Outside what they allow, a cycle runs as ``detect``."""

    @field_validator("windows", mode="before")
    @classmethod
    def _windows_from_json(cls, value: object) -> object:
        """The database's jsonb column arrives as its JSON text."""
        return json.loads(value) if isinstance(value, str) else value

    @property
    def runs_cycles(self) -> bool:
        """Whether the engine runs cycles on it: launchable, and its mode is not ``off``."""
        return self.launchable and self.mode != "off"


class MarqueeListing(NamedTuple):
    """A Marquee as a listing of the fleet shows it (the web view's rows): what a replica keeps
    of a Marquee outside its share, whose full records it does not hold (``Inventory.listed``)."""

    name: str
    launchable: bool
    mode: Mode


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
        held = [MarqueeListing(m.name, m.launchable, m.mode) for m in self.marquees]
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
        several playspecs appears once, with the registry of the first."""
        images: dict[str, Registry | None] = {}
        for playground in self._index.playgrounds_on.get(marquee, ()):
            playspec = self.playspec_of(playground)
            for image in playspec.images:
                images.setdefault(image, self.registry_of(playspec))
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

    @classmethod
    def of(cls, inventory: Inventory) -> _InventoryIndex:
        playgrounds = {playground.name: playground for playground in inventory.playgrounds}
        playgrounds_on: defaultdict[str, list[Playground]] = defaultdict(list)
        for playground in inventory.playgrounds:
            playgrounds_on[playground.marquee].append(playground)
        agent_chats_on: defaultdict[str, list[AgentChat]] = defaultdict(list)
        for chat in inventory.agent_chats:
            agent_chats_on[playgrounds[chat.playground].marquee].append(chat)
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
        )


class DesiredState(Protocol):
    """Where the inventory comes from; the engine depends on this, not on YAML."""

    async def load(self) -> Inventory:
        """The current desired state; raises InventoryError when it cannot be used."""
        ...

    def describe(self) -> str:
        """Where the state comes from, for log lines (a file path, a URL)."""
        ...


@runtime_checkable
class RemoteDesiredState(DesiredState, Protocol):
    """A source behind a network (a database): it can be out of reach while the daemon runs on
    its last good snapshot, which /readyz and the metrics show."""

    reachable: bool | None
    """None before the first read; then whether the last read reached the source."""
    last_error: str | None

    def snapshot_age(self) -> float | None:
        """Seconds since the last good snapshot, or None before the first."""
        ...

    async def listen(
        self,
        wake: Callable[[set[str]], Awaitable[object]],
        resync: Callable[[], Awaitable[object]],
    ) -> None:
        """Until cancelled: ``wake`` the Marquees whose desired state changed, and ``resync``
        when changes may have been missed."""
        ...

    def record_cycle(self, record: CycleRecord) -> None:
        """Hand a finished cycle's observed state (a cycle record) over to be written back,
        soon and off the cycle; never raises. ``close`` writes what is left."""
        ...

    def write_failures(self) -> int:
        """Observed-state records whose write failed since start."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class NarrowDesiredState(RemoteDesiredState, Protocol):
    """A remote source that can read the desired state of a few Marquees alone: a wake-up then
    costs their rows, not the fleet's."""

    async def load_marquees(self, names: Collection[str]) -> Inventory | None:
        """An inventory of ``names`` alone, each as consistent as in a whole snapshot; None
        when only a whole snapshot will do (``load``)."""
        ...

    def set_share(self, owns: Callable[[str], bool] | None) -> None:
        """From the next ``load`` on, hold the full records of the Marquees ``owns`` accepts
        only, and list the others (``Inventory.listed``); None: every Marquee's. A replica's
        memory then grows with its share of the fleet, not with the fleet."""
        ...


class _InventoryLoader(_SafeLoader):
    """SafeLoader that refuses duplicate mapping keys, which PyYAML would silently overwrite."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[tuple[str, str]] = set()
        # A scalar tagged !!map reaches here too: the base class refuses it in words.
        for key_node, _ in node.value if isinstance(node, MappingNode) else ():
            if isinstance(key_node, ScalarNode):
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key_node.value!r}",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


MAX_DEPTH = 32
"""Levels of nesting a document may have; an inventory needs four. Deeper ones are refused
before anything recursive (line mapping, validation) walks them."""

ALIAS_EXPANSION_LIMIT = 100_000
"""Nodes that aliases may add to a document once expanded. Aliases share one node in the parsed
tree, but validation walks every expansion: a 1 KB "billion laughs" document would expand past
1 GiB."""


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _check_shape(root: Node) -> str | None:
    """Why the tree under ``root`` may not be expanded, or None: too deep (counting through
    aliases), a recursive alias, or aliases that expand past ``ALIAS_EXPANSION_LIMIT``.

    One pass without recursion; each shared node's expanded size and height are computed once.
    """
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    on_path: set[int] = set()
    distinct = 0
    stack: list[tuple[Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            children = _children(node)
            size[key] = 1 + sum(size[id(child)] for child in children)
            height[key] = 1 + max((height[id(child)] for child in children), default=0)
        elif key in on_path:
            return "an alias refers to a node that contains it (a recursive alias)"
        elif key not in size:
            distinct += 1
            on_path.add(key)
            stack.append((node, depth, True))
            if depth > MAX_DEPTH:
                return f"nested more than {MAX_DEPTH} levels deep"
            stack.extend((child, depth + 1, False) for child in _children(node))
        if key in height and depth + height[key] - 1 > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep (through an alias)"
    if size[id(root)] - distinct > ALIAS_EXPANSION_LIMIT:
        return f"aliases expand to more than {ALIAS_EXPANSION_LIMIT} further nodes"
    return None


def _node_lines(root: Node, line: int, wanted: set[_Loc]) -> dict[_Loc, int]:
    """Each place of ``wanted`` in the document and its 1-based line; a mapping entry maps to
    its key's line (an empty value's own mark can point at the next line). Only for a tree whose
    text parsed (its shape was accepted then); iterative, as the C parser allows
    nesting deeper than Python's recursion limit. ``wanted`` holds every enclosing place of a
    wanted one too: only those are walked into."""
    lines: dict[_Loc, int] = {}
    stack: list[tuple[Node, _Loc, int]] = [(root, (), line)]
    while stack:
        node, loc, line = stack.pop()
        if loc not in wanted:
            continue
        lines[loc] = line
        if isinstance(node, MappingNode):
            stack.extend(
                (value, (*loc, key.value), key.start_mark.line + 1) for key, value in node.value
            )
        elif isinstance(node, SequenceNode):
            stack.extend(
                (item, (*loc, index), item.start_mark.line + 1)
                for index, item in enumerate(node.value)
            )
    return lines


class _ShapeRefused(Exception):
    """Why a document may not be built: too deep, or aliases expanding too far."""


class _NeedsNodeTree(Exception):
    """The document uses something only the node tree handles (a merge key, a tag on a
    collection, a collection as a key): parse it again the slow way."""


_NODE_TREE_TAGS = ("tag:yaml.org,2002:merge", "tag:yaml.org,2002:value")
"""Implicit tags whose meaning depends on the mapping they are keys of (``<<``, ``=``)."""
_STR_TAG = "tag:yaml.org,2002:str"
_MAPPING_TAGS = (None, "!", "tag:yaml.org,2002:map")
_SEQUENCE_TAGS = (None, "!", "tag:yaml.org,2002:seq")
"""The tags a mapping or a sequence keeps its plain meaning with: ``!!map`` on a sequence (or
``!!seq`` on a mapping) is the constructor's error to name, not a collection to build."""

# The event classes, dispatched on by identity: the C parser makes exactly these, never subclasses.
_SCALAR = yaml.ScalarEvent
_MAPPING_START = yaml.MappingStartEvent
_MAPPING_END = yaml.MappingEndEvent
_SEQUENCE_START = yaml.SequenceStartEvent
_SEQUENCE_END = yaml.SequenceEndEvent
_STREAM_END = yaml.StreamEndEvent

PLAIN_SCALARS_KEPT = 4096
"""Plain scalars whose value one parse remembers: an inventory repeats its keys and most values
(users, paths, booleans) thousands of times, and PyYAML resolves each by regular expressions."""

_MISSING = object()


class _EventBuilder:
    """Builds a document straight from the parser's events, without PyYAML's node tree: a
    fraction of the memory and of the time (bench/README.md: the inventory's event builder).

    One loop per open collection, each taking its own events and dispatching on their class:
    a mapping knows that it wants a key or a value from where it is in its loop, so nothing per
    event is allocated but what the parser makes. A plain scalar that no implicit resolver could
    claim (its first character starts none of their patterns) is a string without a regular
    expression; any other plain scalar is resolved and constructed once per distinct text.

    Only for text without anchors, hence without aliases. Refuses duplicate keys and depth as
    the node path does; what only the node path handles (a merge key, a tag on a collection or
    an explicit one on a scalar, a collection as a key, an alias) raises ``_NeedsNodeTree``.
    """

    def __init__(self, loader: _InventoryLoader) -> None:
        # PyYAML's stubs know neither the C parser's marks nor its resolve's types.
        self.loader: Any = loader
        self.next_event: Callable[[], Any] = loader.get_event
        self.plain: dict[str, object] = {}
        resolvers: dict[str | None, object] = loader.yaml_implicit_resolvers
        # A plain text whose first character no implicit resolver is registered for resolves to
        # a string; that holds as long as no resolver claims every first character (None) and
        # none goes by path, which the safe loader's never do (else: the node tree).
        self.universal = None in resolvers or bool(getattr(loader, "yaml_path_resolvers", None))
        self.resolvable_firsts = frozenset(key for key in resolvers if key is not None)

    def build(self) -> object:
        if self.universal:
            raise _NeedsNodeTree
        next_event = self.next_event
        next_event()  # the stream's start
        event = next_event()
        if type(event) is _STREAM_END:
            return {}  # an empty file, or only comments
        document_start = event.start_mark
        result = self.node(next_event(), 0)
        next_event()  # the document's end: a document has exactly one root node
        event = next_event()
        if type(event) is not _STREAM_END:
            raise ComposerError(
                "expected a single document in the stream",
                document_start,
                "but found another document",
                event.start_mark,
            )
        return result

    def node(self, event: Any, depth: int) -> object:
        """The value of the node ``event`` starts, ``depth`` collections deep."""
        kind = type(event)
        if kind is _SCALAR:
            return self.scalar(event)
        if kind is _MAPPING_START:
            return self.mapping(event, depth + 1)
        if kind is _SEQUENCE_START:
            return self.sequence(event, depth + 1)
        raise _NeedsNodeTree  # an alias without an anchor: the composer names that error

    def opened(self, event: Any, depth: int, plain_tags: tuple[str | None, ...]) -> None:
        if event.tag not in plain_tags:
            raise _NeedsNodeTree  # !!omap, !!set, !!pairs or a local tag: the constructor's
        if depth > MAX_DEPTH:
            raise _ShapeRefused(f"nested more than {MAX_DEPTH} levels deep")

    def mapping(self, start: Any, depth: int) -> dict[Any, Any]:
        self.opened(start, depth, _MAPPING_TAGS)
        data: dict[Any, Any] = {}
        next_event = self.next_event
        plain = self.plain
        firsts = self.resolvable_firsts
        # The scalar fast path, written out for key and value: an untagged scalar that is quoted
        # or that no resolver could claim is its text; otherwise remembered or resolved.
        while True:
            event = next_event()
            kind = type(event)
            if kind is not _SCALAR:
                if kind is _MAPPING_END:
                    return data
                raise _NeedsNodeTree  # a collection or an alias as a key
            key = event.value
            if event.tag is not None:
                key = self.scalar(event)
            elif event.implicit[0] and key[:1] in firsts:
                key = plain.get(key, _MISSING)
                if key is _MISSING:
                    key = self.resolved(event)
            if key in data:
                raise ConstructorError(
                    "while constructing a mapping",
                    start.start_mark,
                    f"found duplicate key {key!r}",
                    event.start_mark,
                )
            event = next_event()
            kind = type(event)
            if kind is not _SCALAR:
                data[key] = self.node(event, depth)
                continue
            value = event.value
            if event.tag is not None:
                value = self.scalar(event)
            elif event.implicit[0] and value[:1] in firsts:
                value = plain.get(value, _MISSING)
                if value is _MISSING:
                    value = self.resolved(event)
            data[key] = value

    def sequence(self, start: Any, depth: int) -> list[Any]:
        self.opened(start, depth, _SEQUENCE_TAGS)
        items: list[Any] = []
        append = items.append
        next_event = self.next_event
        while True:
            event = next_event()
            kind = type(event)
            if kind is _SCALAR:
                append(self.scalar(event))
            elif kind is _SEQUENCE_END:
                return items
            else:
                append(self.node(event, depth))

    def scalar(self, event: Any) -> object:
        tag = event.tag
        value: str = event.value
        if tag is not None and tag != "!":
            raise _NeedsNodeTree  # an explicit tag: the constructor's checks apply
        if not event.implicit[0]:  # quoted: a string
            return value
        if tag is None:
            if value[:1] not in self.resolvable_firsts:
                return value  # what resolve says, without its regular expressions
            known = self.plain.get(value, _MISSING)
            if known is not _MISSING:
                return known
        return self.resolved(event)

    def resolved(self, event: Any) -> object:
        """A plain scalar's value as the composer and constructor make it (``!`` resolves as no
        tag does); remembered for the next scalar of the same text without a tag."""
        value: str = event.value
        tag = self.loader.resolve(ScalarNode, value, event.implicit)
        if tag == _STR_TAG:
            data: object = value
        elif tag in _NODE_TREE_TAGS:
            raise _NeedsNodeTree
        else:
            node = ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
            data = self.loader.construct_object(node)
        if event.tag is None and len(self.plain) < PLAIN_SCALARS_KEPT:
            self.plain[value] = data
        return data


RELEASE_SLICE = 256
"""Entries of a top-level list freed at a time once a document is done with."""


def _release_in_slices(root: Node) -> None:
    """Free the node tree a slice of each top-level list at a time.

    Dropped whole, a large tree is freed in one cascade of C deallocations that holds the
    interpreter lock long enough to stall the event loop the read was moved off
    (bench/README.md); between slices the lock can change hands.
    """
    if isinstance(root, MappingNode):
        for _, value in root.value:
            if isinstance(value, SequenceNode):
                _release_lists(value.value)


def _release_lists(data: object) -> None:
    """Empty ``data`` a slice at a time if it is a list, or each list among a mapping's values
    (a document as parsed), for the reason ``_release_in_slices`` gives."""
    for items in data.values() if isinstance(data, dict) else [data]:
        if isinstance(items, list):
            while items:
                del items[-RELEASE_SLICE:]


def _line_of(loc: _Loc, lines: dict[_Loc, int]) -> int:
    """The line of `loc`, or of its nearest enclosing place (a missing field has no line)."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return lines.get((), 1)


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
    may be a secret typed into the wrong field (`password: ...`)."""
    value = error["input"]
    if error["type"] == "extra_forbidden" or not isinstance(value, str | int | float | date | None):
        return ""
    return f" (value {_VALUE_REPR.repr(value.isoformat() if isinstance(value, date) else value)})"


def _reason(error: ErrorDetails) -> str:
    """Our own validators raise ValueError; show their message without pydantic's prefix."""
    if error["type"] == "value_error":
        return str(error.get("ctx", {})["error"])
    return error["msg"]


INVENTORY_MAX_BYTES = 8 << 20
"""Default bytes an inventory file may have: room for 10,000 Marquees with 5 Playgrounds each,
with what parsing costs per byte bounded (bench/README.md: inventory size and memory)."""

INVENTORY_READ_TIMEOUT = 30.0
"""Default seconds reading, parsing and validating it may take."""


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


@dataclass(frozen=True)
class _Loaded:
    """What the last read of the file gave (an inventory, or why it was refused), and what tells
    whether the file changed since."""

    outcome: Inventory | InventoryError
    signature: tuple[int, ...]
    digest: bytes
    stat_trusted: bool

    def result(self) -> Inventory:
        """The inventory, or the refusal raised again (with no traceback piling up on it)."""
        if isinstance(self.outcome, InventoryError):
            raise self.outcome.with_traceback(None)
        return self.outcome


RACY_SECONDS = 2.0
"""A file modified this close to when it was read may be written again within the timestamp's
granularity without its stat fields changing (git's "racily clean" case): its next read compares
content, not stat."""


class YamlInventorySource:
    """The inventory from a YAML file, re-read on every `load` so edits take effect next cycle.

    Re-reading costs nothing while the file is unchanged: a ``stat`` whose fields match the last
    read returns the inventory parsed then; changed fields make it read the bytes and compare their
    digest; only changed content is parsed and validated. Reading is bounded in size
    (``max_bytes``, regular files only) and in time (``timeout``): the work runs in a thread of
    its own, so neither a slow disk nor a huge document stops the event loop or a shutdown; a read
    still running when the next is due makes that one fail rather than pile up threads.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = INVENTORY_MAX_BYTES,
        timeout: float = INVENTORY_READ_TIMEOUT,
    ) -> None:
        # Absolute now, so a later chdir changes neither the file nor how relative paths resolve.
        self._path = path.absolute()
        self._max_bytes = max_bytes
        self._timeout = timeout
        self._loaded: _Loaded | None = None
        self._reading = threading.Lock()

    def describe(self) -> str:
        return str(self._path)

    async def load(self) -> Inventory:
        if not self._reading.acquire(blocking=False):
            raise InventoryError(
                f"{self._path}: the previous read has not finished; inventory_read_timeout is "
                f"{self._timeout:g} s"
            )
        try:
            return await in_thread(self._load_and_unlock, self._timeout, name="inventory-read")
        except TimeoutError:
            raise InventoryError(
                f"{self._path}: not read and validated within {self._timeout:g} s "
                "(inventory_read_timeout)"
            ) from None

    def _load_and_unlock(self) -> Inventory:
        try:
            return self._load()
        except InventoryError:
            raise
        except Exception as exc:  # whatever a hostile file finds: still one readable line
            raise InventoryError(f"{self._path}: cannot load inventory: {exc!r}") from exc
        finally:
            self._reading.release()

    def _load(self) -> Inventory:
        """The file's inventory; a file whose content was refused before is refused again
        without parsing it again, so a bad edit costs one parse, not one per tick."""
        loaded = self._loaded
        if loaded is not None and loaded.stat_trusted:
            try:
                if signature_of(os.stat(self._path)) == loaded.signature:
                    return loaded.result()
            except OSError:
                pass  # the read below names the problem
        try:
            content = read_limited(self._path, self._max_bytes)
        except FileRefused as exc:
            raise InventoryError(f"{self._path}: cannot read inventory: {exc.reason}") from None
        digest = hashlib.sha256(content.data).digest()
        trusted = time.time_ns() - content.mtime_ns > RACY_SECONDS * 1e9
        outcome: Inventory | InventoryError
        if loaded is not None and loaded.digest == digest:
            outcome = loaded.outcome
        else:
            try:
                outcome = self._validated(content.data)
            except InventoryError as exc:
                # Kept, so it must not keep what it was raised from: the parser's errors, frames.
                outcome = exc.with_traceback(None)
                outcome.__context__ = None
        self._loaded = _Loaded(outcome, content.signature, digest, trusted)
        return self._loaded.result()

    def _validated(self, data: bytes) -> Inventory:
        with _collector_paused():
            inventory = self._parsed_and_validated(data)
            # Built here, in the reading thread, not on the loop; with the collector still
            # paused, as its 100,000 entries would start collections that walk the whole state.
            inventory._index  # noqa: B018
            return inventory

    def _parsed_and_validated(self, data: bytes) -> Inventory:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise InventoryError(
                f"{self._path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x})"
            ) from None
        try:
            document = self._parse(text)
        except yaml.MarkedYAMLError as exc:
            raise InventoryError(self._yaml_problem(exc)) from None
        except yaml.YAMLError as exc:
            raise InventoryError(f"{self._path}: invalid YAML: {exc}") from None
        except _ShapeRefused as exc:
            raise InventoryError(f"{self._path}: invalid YAML: {exc}") from None
        except RecursionError:  # the pure-Python parser, without libyaml's own depth limit
            raise InventoryError(f"{self._path}: invalid YAML: nested too deeply") from None
        context = {_BASE_DIR: self._path.parent, _PATHS_RESOLVED: {}}
        checked, errors, count = _entries_checked(document, context)
        if not count:
            try:
                return Inventory.model_validate(checked, context=context)
            except ValidationError as exc:
                errors, count = exc.errors(include_url=False), exc.error_count()
        del checked
        # A refused document and its errors (50,000 of them, say) are freed a slice at a time
        # before the error is raised, not in one cascade with this frame (_release_in_slices).
        _release_lists(document)
        lines = self._lines(text, (error["loc"] for error in errors))
        located = sorted(
            ((_line_of(error["loc"], lines), error) for error in errors),
            key=lambda pair: pair[0],  # file order, the order an editor shows them in
        )
        del lines
        _release_lists(errors)
        problems = [
            f"{self._path}:{line}: {_place(error['loc'])}: {_reason(error)}{_shown_value(error)}"
            for line, error in located
        ]
        _release_lists(located)
        raise InventoryError(*problems, unlisted=count - len(problems))

    def _parse(self, text: str) -> object:
        """The document's data. Text without an anchor (every inventory we have seen) is built
        from the parser's events; anything else through PyYAML's node tree, whose aliases are
        bounded first."""
        if "&" not in text:
            loader = _InventoryLoader(text)
            try:
                return _EventBuilder(loader).build()
            except _NeedsNodeTree:
                pass
            finally:
                loader.dispose()
        loader = _InventoryLoader(text)
        try:
            node = self._checked_tree(loader)
            if node is None:
                return {}
            document = loader.construct_document(node)
            _release_in_slices(node)
            return document
        finally:
            loader.dispose()

    def _lines(self, text: str, places: Iterable[_Loc]) -> dict[_Loc, int]:
        """Where ``places`` (and the places around them) are in a document that parsed, for
        its validation errors. Its shape was accepted when it parsed: not checked again (that
        check's tables of a million-node tree grow in steps that hold the loop 0.1 s each)."""
        wanted = {place[:end] for place in places for end in range(len(place) + 1)}
        loader = _InventoryLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return {}
            lines = _node_lines(node, node.start_mark.line + 1, wanted)
            _release_in_slices(node)
            return lines
        finally:
            loader.dispose()

    @staticmethod
    def _checked_tree(loader: _InventoryLoader) -> Node | None:
        """The node tree, refused when too deep or too expanded by aliases. Only documents the
        event builder hands over (anchors, merge keys, tags) get here."""
        node = loader.get_single_node()
        if node is not None:
            refused = _check_shape(node)
            if refused is not None:
                raise _ShapeRefused(refused)
        return node

    def _yaml_problem(self, exc: yaml.MarkedYAMLError) -> str:
        mark = exc.problem_mark or exc.context_mark
        where = f"{self._path}:{mark.line + 1}" if mark else str(self._path)
        context = (
            f" ({exc.context} at line {exc.context_mark.line + 1})"
            if exc.context and exc.context_mark
            else ""
        )
        return f"{where}: invalid YAML: {exc.problem or exc.context}{context}"
