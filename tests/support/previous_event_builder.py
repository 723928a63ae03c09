"""The inventory's event builder as it was before the one-loop-per-collection rewrite (commit
4bf198e), kept word for word as the oracle of the property tests: the new builder must make the
same data from any text and refuse, or hand to the node tree, exactly what this one did. One
defect it shared is mended in both: a collection tagged as the other kind (``!!map`` on a
sequence) was built as a plain one; it goes to the node tree, which refuses it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import ScalarNode

from playguard_async.desired_state.yaml_source import (
    _MAPPING_TAGS,
    _NODE_TREE_TAGS,
    _SEQUENCE_TAGS,
    _STR_TAG,
    MAX_DEPTH,
    _InventoryLoader,
    _NeedsNodeTree,
    _ShapeRefused,
)


@dataclass
class _Open:
    """A collection being built from events; a mapping's key waits here for its value."""

    data: dict[Any, Any] | list[Any]
    start: Any  # a parser mark: the C and Python parsers have classes of their own
    key: Any = None
    awaiting_value: bool = False

    @property
    def wants_key(self) -> bool:
        return isinstance(self.data, dict) and not self.awaiting_value


PLAIN_TAGS_KEPT = 4096
"""Plain scalars whose resolved tag one parse remembers: an inventory repeats its keys and most
values (users, paths, branches) thousands of times, and PyYAML resolves each by regular
expressions."""


class PreviousEventBuilder:
    """Builds a document straight from the parser's events, without PyYAML's node tree: a
    tenth of the memory (a 10,000-Marquee tree is 300 MiB of nodes) and less time.

    Only for text without anchors, hence without aliases. Refuses duplicate keys and depth as
    the node path does; what only the node path handles (a merge key, a tag on a collection, a
    collection as a key, an alias) raises ``_NeedsNodeTree``.
    """

    def __init__(self, loader: _InventoryLoader) -> None:
        # PyYAML's stubs know neither the C parser's marks nor its resolve's types.
        self.loader: Any = loader
        self.stack: list[_Open] = []
        self.result: object = None
        self.plain_tags: dict[str, str] = {}

    def build(self) -> object:
        loader = self.loader
        loader.get_event()  # the stream's start
        if loader.check_event(yaml.StreamEndEvent):
            return {}  # an empty file, or only comments
        document_start = loader.get_event().start_mark
        while not loader.check_event(yaml.DocumentEndEvent):
            self.take(loader.get_event())
        loader.get_event()
        if not loader.check_event(yaml.StreamEndEvent):
            raise ComposerError(
                "expected a single document in the stream",
                document_start,
                "but found another document",
                loader.get_event().start_mark,
            )
        return self.result

    def take(self, event: Any) -> None:
        if isinstance(event, yaml.ScalarEvent):
            self.add(self.scalar(event), event.start_mark)
        elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            plain_tags = (
                _MAPPING_TAGS if isinstance(event, yaml.MappingStartEvent) else _SEQUENCE_TAGS
            )
            if event.tag not in plain_tags or (self.stack and self.stack[-1].wants_key):
                raise _NeedsNodeTree
            if len(self.stack) >= MAX_DEPTH:
                raise _ShapeRefused(f"nested more than {MAX_DEPTH} levels deep")
            empty: dict[Any, Any] | list[Any] = (
                {} if isinstance(event, yaml.MappingStartEvent) else []
            )
            self.stack.append(_Open(empty, event.start_mark))
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            self.add(self.stack.pop().data, event.start_mark)
        else:  # an alias without an anchor: the composer names that error
            raise _NeedsNodeTree

    def scalar(self, event: Any) -> object:
        if event.tag is not None and event.tag != "!":
            raise _NeedsNodeTree  # an explicit tag: the constructor's checks apply
        if not event.implicit[0]:  # quoted: a string
            return event.value
        tag = self.plain_tags.get(event.value)
        if tag is None:
            tag = self.loader.resolve(ScalarNode, event.value, event.implicit)
            if len(self.plain_tags) < PLAIN_TAGS_KEPT:
                self.plain_tags[event.value] = tag
        if tag == _STR_TAG:
            return event.value
        if tag in _NODE_TREE_TAGS:
            raise _NeedsNodeTree
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        return self.loader.construct_object(node)

    def add(self, value: object, mark: Any) -> None:
        if not self.stack:
            self.result = value
            return
        top = self.stack[-1]
        if isinstance(top.data, list):
            top.data.append(value)
        elif top.awaiting_value:
            top.data[top.key] = value
            top.awaiting_value = False
        elif value in top.data:
            raise ConstructorError(
                "while constructing a mapping", top.start, f"found duplicate key {value!r}", mark
            )
        else:
            top.key, top.awaiting_value = value, True
