"""The inventory as an adversary writes it: every failure to read, parse or validate is one
``InventoryError`` naming the file, bounded in memory and time; an unchanged file is not parsed
again."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from playguard_async.desired_state import yaml_source
from playguard_async.desired_state.model import (
    KEPT_PROBLEMS,
    SHOWN_PROBLEMS,
    Inventory,
    InventoryError,
)
from playguard_async.desired_state.yaml_source import ALIAS_EXPANSION_LIMIT, YamlInventorySource
from playguard_async.kits.aio import bounded, in_thread
from playguard_async.kits.files import FileContent
from tests.support.hostile import GOOD, HOSTILE, YAML_PIECE_TEXTS, laughs


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_bytes(data)
    return path


async def refusal(source: YamlInventorySource) -> InventoryError:
    with pytest.raises(InventoryError) as caught:
        await source.load()
    return caught.value


def assert_readable(error: InventoryError, path: Path) -> None:
    """One line per problem, each naming the file, none of them a screenful."""
    assert error.problems
    for problem in error.problems:
        assert problem.startswith(str(path)), problem
        assert "\n" not in problem
        assert len(problem) < 600, problem[:200]
    assert len(error.problems) < 100


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_hostile_document_is_one_readable_error_fast(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, HOSTILE[name])
    started = time.monotonic()
    error = await refusal(YamlInventorySource(path))
    assert time.monotonic() - started < 5.0
    assert_readable(error, path)


def test_the_billion_laughs_document_is_about_a_kilobyte() -> None:
    assert len(laughs(9)) < 1100
    assert ALIAS_EXPANSION_LIMIT < 8**6


async def test_aliases_within_the_bound_still_work(tmp_path: Path) -> None:
    text = GOOD.replace("  - name: m1\n", "  - &m1\n    name: m1\n") + "registries: []\n"
    path = write(tmp_path, (text + "playgrounds: []\nx: *m1\n").encode())
    error = await refusal(YamlInventorySource(path))
    assert "x: Extra inputs are not permitted" in str(error)  # parsed, then validated


def special_file(kind: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        elif kind == "missing":
            return
        else:
            path.symlink_to(kind)

    return make


@pytest.mark.parametrize("kind", ["fifo", "directory", "missing", "/dev/zero", "/dev/null"])
async def test_anything_but_a_regular_file_is_refused_without_blocking(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "inventory.yaml"
    special_file(kind)(path)
    error = await bounded(5.0, refusal(YamlInventorySource(path)))
    assert_readable(error, path)


@pytest.mark.parametrize("size", [1025, 4096, 1 << 20])
async def test_a_file_past_the_size_limit_is_refused_unread(tmp_path: Path, size: int) -> None:
    path = write(tmp_path, b"#" * size)
    error = await refusal(YamlInventorySource(path, max_bytes=1024))
    assert str(error) == f"{path}: cannot read inventory: {size} bytes, more than the limit of 1024"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_any_bytes_load_or_fail_as_one_inventory_error(data: bytes) -> None:
    assert_loads_or_refuses(data)


YAML_PIECES = st.sampled_from(YAML_PIECE_TEXTS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(YAML_PIECES, max_size=60).map("".join))
def test_any_yamlish_text_loads_or_fails_as_one_inventory_error(text: str) -> None:
    assert_loads_or_refuses(text.encode("utf-8", "surrogatepass"))


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
    st.sampled_from(["yes", "off", "0755", "1e3", "2030-06-30T18:00:00+02:00", "<<", "~", ""]),
)  # fmt: skip
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(SCALARS, inner, max_size=4),
    max_leaves=20,
)


def node_tree_data(text: str) -> object:
    """What PyYAML's own node path makes of ``text`` with the inventory's loader."""
    return yaml.load(text, Loader=yaml_source._InventoryLoader)


def event_data(text: str) -> object:
    loader = yaml_source._InventoryLoader(text)
    try:
        return yaml_source._EventBuilder(loader).build()
    finally:
        loader.dispose()


def assert_both_paths_agree(text: str) -> None:
    """The event builder (the fast path) makes what the node path makes of any text without an
    anchor, refuses what it refuses, or hands the text to it."""
    try:
        expected: object = node_tree_data(text)
    except yaml.YAMLError as exc:
        expected = type(exc)
    try:
        got: object = event_data(text)
    except yaml_source._NeedsNodeTree:
        return
    except yaml_source._ShapeRefused:
        return  # deeper than an inventory may be: refused on either path by the source
    except yaml.YAMLError as exc:
        if "found duplicate key" in str(exc):
            return  # keys equal as values (1 and 0x1): refused here, the stricter reading
        got = type(exc)
    if expected is None and got == {}:
        return  # an empty stream: the source reads it as an empty inventory on both paths
    assert repr(got) == repr(expected), text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS, st.booleans())
def test_the_event_builder_makes_what_the_node_tree_makes(document: object, flow: bool) -> None:
    assert_both_paths_agree(yaml.safe_dump(document, default_flow_style=flow))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(YAML_PIECES.filter(lambda piece: "&" not in piece), max_size=60).map("".join))
def test_the_event_builder_agrees_on_yamlish_text(text: str) -> None:
    assert_both_paths_agree(text)


@pytest.mark.parametrize(
    "text",
    [
        "!!map \n- ",
        "!!map [1, 2]",
        "!!seq \na: 1",
        "!!seq {a: 1}",
        "- !!map [1]",
        "a: !!seq {b: 1}",
        "a: !!map\n  - b",
        "! [1]",
        "! {a: 1}",
        "!!map {a: 1}",
        "!!seq [1]",
    ],
)
def test_a_collection_tagged_as_the_other_kind_is_refused_on_both_paths(text: str) -> None:
    """Found by the generated test above: ``!!map`` on a sequence was built as a list."""
    assert_both_paths_agree(text)


def assert_loads_or_refuses(data: bytes) -> None:
    directory = Path(os.environ.get("TMPDIR", "/tmp")) / f"pg-hostile-{os.getpid()}"
    directory.mkdir(exist_ok=True)
    path = write(directory, data)
    try:
        loaded = asyncio.run(YamlInventorySource(path).load())
    except InventoryError as error:
        assert_readable(error, path)
    else:
        assert isinstance(loaded, Inventory)
    finally:
        path.unlink()


# -- re-reading ------------------------------------------------------------------------------


def age(path: Path, seconds: float) -> None:
    """Set the file's times ``seconds`` into the past, as an inventory edited earlier has."""
    past = time.time() - seconds
    os.utime(path, (past, past))


def counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    parses: list[int] = []
    real = YamlInventorySource._validated

    def counted(self: YamlInventorySource, data: bytes) -> Inventory:
        parses.append(len(data))
        return real(self, data)

    monkeypatch.setattr(YamlInventorySource, "_validated", counted)
    return parses


async def test_an_unchanged_file_is_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses = counting_parses(monkeypatch)
    path = write(tmp_path, GOOD.encode())
    age(path, 10)
    source = YamlInventorySource(path)
    first = await source.load()
    assert await source.load() is first
    age(path, 5)  # stat changed, content the same: read and digested, not parsed
    assert await source.load() is first
    assert len(parses) == 1

    path.write_text(GOOD.replace("m1", "m2"), encoding="utf-8")
    age(path, 10)
    changed = await source.load()
    assert [m.name for m in changed.marquees] == ["m2"]
    assert len(parses) == 2


async def test_a_file_written_just_now_is_compared_by_content_not_stat(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.encode())
    source = YamlInventorySource(path)
    await source.load()
    status = path.stat()
    # Same size, same mtime and ctime can follow a second write within the clock's granularity.
    path.write_text(GOOD.replace("m1", "m9"), encoding="utf-8")
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert [m.name for m in (await source.load()).marquees] == ["m9"]


async def test_a_read_that_hangs_is_abandoned_and_the_next_one_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def hang(path: Path, limit: int) -> FileContent:
        release.wait(30)
        return FileContent(b"", (), 0)

    monkeypatch.setattr(yaml_source, "read_limited", hang)
    path = write(tmp_path, GOOD.encode())
    source = YamlInventorySource(path, timeout=0.2)
    started = time.monotonic()
    error = await refusal(source)
    assert time.monotonic() - started < 2.0
    assert str(error) == f"{path}: not read and validated within 0.2 s (inventory_read_timeout)"
    assert "previous read has not finished" in str(await refusal(source))
    release.set()


async def test_in_thread_leaves_the_loop_free_and_hands_back_errors() -> None:
    ticks = 0

    async def count() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    counter = asyncio.create_task(count())
    with pytest.raises(TimeoutError):
        await in_thread(lambda: time.sleep(0.5), 0.2, name="test-sleep")
    counter.cancel()
    assert ticks >= 5, "the loop kept running while the thread slept"
    with pytest.raises(ZeroDivisionError):
        await in_thread(lambda: 1 // 0, 1.0, name="test-error")


async def test_a_document_of_many_errors_lists_the_first_in_file_order_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    """``- {}`` lacks five fields: 3,000 of them are 15,000 problems, validated a slice at a
    time (no call holds the loop for all of them), of which ``KEPT_PROBLEMS`` are located."""
    path = write(tmp_path, b"marquees:\n" + b"- {}\n" * 3000 + b"registries: [{}]\n")
    error = await refusal(YamlInventorySource(path))
    assert error.count == 5 * 3000 + 3
    assert KEPT_PROBLEMS <= len(error.problems) < KEPT_PROBLEMS + 5
    assert error.problems[0] == f"{path}:2: marquees[0].name: Field required"
    assert error.summary().splitlines()[-1] == f"... and {error.count - SHOWN_PROBLEMS} more errors"
    lines = [int(problem.split(":")[1]) for problem in error.problems]
    assert lines == sorted(lines)
