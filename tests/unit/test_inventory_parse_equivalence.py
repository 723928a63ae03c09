"""The inventory's YAML parse makes what ``yaml.safe_load`` makes of any document an inventory may
be, and its fast event builder refuses (or hands to the node tree) exactly what the builder before
it did, with the same message, for any text."""

from __future__ import annotations

from datetime import UTC, timedelta, timezone
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from playguard_async.desired_state import yaml_source
from playguard_async.desired_state.yaml_source import YamlInventorySource
from tests.support.hostile import YAML_PIECE_TEXTS
from tests.support.previous_event_builder import PreviousEventBuilder

TRICKY_TEXT = [
    "yes", "off", "No", "0755", "0o17", "0x1F", "1_000", "12:30:00", "1e3", "1e999", ".inf",
    "-.Inf", ".nan", "~", "null", "", "<<", "=", "2001-12-14", "2030-06-30T18:00:00+02:00",
    "-", "- x", "a: b", "#", " lead", "trail ", "!", "&a", "*a", "'", '"', "\\", "\t", "\n",
    "\x85", "\u2028", "\ufeff", "é", "edge-1", "10.0.0.1", "feature/1",
]  # fmt: skip

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(TRICKY_TEXT),
    st.dates(),
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))])),
    st.binary(max_size=8),
)
KEYS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.sampled_from(TRICKY_TEXT)
)


def _documents(leaves: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
        max_leaves=24,
    )


DOCUMENTS = _documents(SCALARS)
# The same collection twice in one document: the dumper writes an anchor and an alias for it.
SHARING = st.tuples(
    st.lists(SCALARS, min_size=1, max_size=3) | st.dictionaries(KEYS, SCALARS, min_size=1),
    DOCUMENTS,
).map(lambda pair: {"shared": pair[0], "again": [pair[0], pair[1]]})

DUMP_OPTIONS = st.fixed_dictionaries(
    {
        "default_flow_style": st.sampled_from([False, True, None]),
        "default_style": st.sampled_from([None, None, None, "'", '"', "|", ">"]),
        "allow_unicode": st.booleans(),
        "width": st.sampled_from([12, 80]),
        "explicit_start": st.booleans(),
        "explicit_end": st.booleans(),
        "canonical": st.sampled_from([False, False, False, True]),
        "sort_keys": st.booleans(),
    }
)


def parsed(text: str) -> object:
    """What the source makes of ``text`` before validation (event builder, else node tree)."""
    return YamlInventorySource(Path("inventory.yaml"))._parse(text)


def safe_loaded(text: str) -> object:
    if len(list(yaml.parse(text, Loader=yaml.CSafeLoader))) == 2:
        return {}  # no document at all (only a stream's start and end): an empty inventory
    return yaml.safe_load(text)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS | SHARING, DUMP_OPTIONS)
def test_the_parse_makes_what_safe_load_makes(document: object, options: dict[str, object]) -> None:
    text = yaml.safe_dump(document, **options)  # type: ignore[call-overload]
    assert repr(parsed(text)) == repr(safe_loaded(text)), text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TRICKY_TEXT), min_size=1, max_size=30))
def test_many_repeats_of_a_value_parse_as_safe_load_parses_them(values: list[str]) -> None:
    """Remembered plain scalars (a key or value seen before) are the values safe_load makes."""
    text = "".join(f"- {value}\n- {{k{index}: {value}}}\n" for index, value in enumerate(values))
    try:
        expected: object = safe_loaded(text)
    except yaml.YAMLError:
        return  # not YAML (a value like '- x' starts a nested list here): nothing to compare
    assert repr(parsed(text)) == repr(expected), text


def outcome(
    builder: type[yaml_source._EventBuilder | PreviousEventBuilder], text: str
) -> tuple[str, ...]:
    """What ``builder`` makes of ``text``: its data, or the refusal with its message, or the
    hand-over to the node tree."""
    loader = yaml_source._InventoryLoader(text)
    try:
        return ("data", repr(builder(loader).build()))
    except yaml_source._NeedsNodeTree:
        return ("node tree",)
    except Exception as exc:  # a YAML error, a shape refusal, an int too long to convert
        return ("refused", type(exc).__name__, str(exc))
    finally:
        loader.dispose()


def assert_same_outcome(text: str) -> None:
    assert outcome(yaml_source._EventBuilder, text) == outcome(PreviousEventBuilder, text), text


EXTRA_PIECES = ["! ", ".nan", "0x1", "yes", "= ", "k: v", "k: ", "? k", "1: a", "0x1: b",
                "- [a, b]", "{a: 1, a: 2}", "*b", "!!int ", "!local ", "'1'"]  # fmt: skip
YAMLISH = st.lists(
    st.sampled_from([piece for piece in YAML_PIECE_TEXTS + EXTRA_PIECES if "&" not in piece]),
    max_size=60,
).map("".join)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(YAMLISH)
def test_the_builder_refuses_what_it_refused_before_on_yamlish_text(text: str) -> None:
    assert_same_outcome(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS, DUMP_OPTIONS)
def test_the_builder_makes_what_it_made_before_of_dumped_documents(
    document: object, options: dict[str, object]
) -> None:
    assert_same_outcome(yaml.safe_dump(document, **options))  # type: ignore[call-overload]


def test_the_builder_refuses_depth_and_duplicates_as_before() -> None:
    limit = yaml_source.MAX_DEPTH
    for text in (
        "[" * limit + "]" * limit,
        "[" * (limit + 1) + "]" * (limit + 1),
        "k:\n" + "".join("  " * level + "- \n" for level in range(1, limit + 2)),
        "a: 1\nb: 2\na: 3\n",
        "1: a\n0x1: b\n",
        ".nan: 1\n.nan: 2\n",
        "a: 1\n---\nb: 2\n",
        "a: [1, 2\n",
    ):
        assert_same_outcome(text)
        assert outcome(yaml_source._EventBuilder, text)[0] != "node tree", text
