"""The desired state from a YAML file: a duplicate-key-refusing loader over libyaml, an event
builder that makes the document without PyYAML's node tree when it can, and ``YamlInventorySource``,
which re-reads the file only when it changed, bounded in size and time.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from playguard_async.desired_state.fields import (
    BASE_DIR,
    PATHS_RESOLVED,
)
from playguard_async.desired_state.file_version import file_version
from playguard_async.desired_state.model import (
    Inventory,
    InventoryError,
    _collector_paused,
    _entries_checked,
    _Loc,
    _place,
    _reason,
    _shown_value,
)
from playguard_async.desired_state.source import Ability
from playguard_async.kits.aio import in_thread
from playguard_async.kits.files import FileRefused, read_limited, signature_of

try:  # libyaml: faster (bench/README.md), and it refuses nesting past 1,000 levels itself
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]


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


INVENTORY_MAX_BYTES = 8 << 20
"""Default bytes an inventory file may have: room for 10,000 Marquees with 5 Playgrounds each,
with what parsing costs per byte bounded (bench/README.md: inventory size and memory)."""

INVENTORY_READ_TIMEOUT = 30.0
"""Default seconds reading, parsing and validating it may take."""


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

    abilities: frozenset[Ability] = frozenset()

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
                outcome._version = file_version(self._path, digest.hex(), content.mtime_ns)
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
        context = {BASE_DIR: self._path.parent, PATHS_RESOLVED: {}}
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
