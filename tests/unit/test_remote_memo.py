"""Pure logic of the remote layer's memory: the compose memo's bounds, the pool's connection key,
the parsing of the batched host read, hostile answers included, and the answer remembered after
``up``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.desired_state.model import Marquee
from playguard_async.remote.compose import CONFIG_HASH_LABEL, SERVICE_LABEL, ComposeProject
from playguard_async.remote.docker import PLAYGROUND
from playguard_async.remote.errors import RemoteCommandFailed
from playguard_async.remote.host_state import (
    ComposeState,
    PlaygroundFiles,
    _parse_files,
    _parse_read,
)
from playguard_async.remote.memo import (
    KEPT_LIMIT,
    ComposeAnswer,
    ComposeMemo,
    encode_kept,
    parse_kept,
)
from playguard_async.remote.pool import connection_key
from playguard_async.remote.ssh import RemoteSession

COMMIT = "a" * 40
DIGEST = "b" * 64


def answer(inputs: str) -> ComposeAnswer:
    return ComposeAnswer(inputs, ("app",), (("app", DIGEST),))


def test_memo_answers_only_for_the_same_inputs() -> None:
    memo = ComposeMemo(4)
    memo.put(("m", "pg-a"), answer("one"))
    assert memo.get(("m", "pg-a"), "one") == answer("one")
    assert memo.get(("m", "pg-a"), "two") is None
    assert memo.get(("other", "pg-a"), "one") is None


def test_memo_forgets_the_least_recently_used_past_its_size() -> None:
    memo = ComposeMemo(2)
    memo.put(("m", "a"), answer("a"))
    memo.put(("m", "b"), answer("b"))
    assert memo.get(("m", "a"), "a") is not None  # a is now the most recent
    memo.put(("m", "c"), answer("c"))
    assert len(memo) == 2
    assert memo.get(("m", "b"), "b") is None
    assert memo.get(("m", "a"), "a") is not None


def test_memo_of_size_zero_remembers_nothing() -> None:
    memo = ComposeMemo(0)
    memo.put(("m", "a"), answer("a"))
    assert memo.get(("m", "a"), "a") is None
    assert len(memo) == 0


def marquee(tmp_path: Path, **changes: object) -> Marquee:
    key, known = tmp_path / "id", tmp_path / "known_hosts"
    for path in (key, known):
        if not path.exists():
            path.write_text(f"{path.name}\n")
    fields: dict[str, object] = {
        "name": "edge-1",
        "host": "127.0.0.1",
        "user": "root",
        "identity_file": key,
        "known_hosts": known,
        "workdir": "/srv/pg",
    }
    return Marquee.model_validate({**fields, **changes})


def test_connection_key_follows_the_entry_and_the_key_files_bytes(tmp_path: Path) -> None:
    base = marquee(tmp_path)
    key = connection_key(base)
    assert connection_key(marquee(tmp_path)) == key
    assert connection_key(marquee(tmp_path, port=2222)) != key
    assert connection_key(marquee(tmp_path, workdir="/srv/other")) != key
    base.known_hosts.write_text("another host key\n")
    assert connection_key(base) != key


def test_connection_key_of_an_unreadable_file_is_its_own(tmp_path: Path) -> None:
    base = marquee(tmp_path)
    key = connection_key(base)
    base.identity_file.unlink()
    assert connection_key(base) != key


def project(tmp_path: Path, playground: str = "web") -> ComposeProject:
    return ComposeProject(marquee(tmp_path), playground, "compose.yaml", ("docker-compose",))


def test_batched_read_parses_each_playground(tmp_path: Path) -> None:
    web, api = project(tmp_path, "web"), project(tmp_path, "api")
    output = (
        f"1 {COMMIT} clean\n0 - -\nfiles\n{DIGEST}  {web.compose_path}\n{DIGEST}  {web.override}\n"
    )
    files = _parse_files([web, api], output)
    assert files["web"].head == COMMIT
    assert files["web"].digest(web.compose_path) == DIGEST
    assert files["web"].digest(f"{web.checkout}/.env") == "-"
    assert files["api"].head is None
    assert not files["api"].git_present


@pytest.mark.parametrize(
    "output",
    [
        "",
        "files\n",
        f"1 {COMMIT} clean\n",
        f"1 {COMMIT}\nfiles\n",
        f"1 {COMMIT} clean extra\nfiles\n",
        f"2 {COMMIT} clean\nfiles\n",
        "1 not-a-commit clean\nfiles\n",
        f"1 {COMMIT} dirty\nfiles\n",
        f"1 {COMMIT} clean\nfiles\nnot a digest line\n",
        f"1 {COMMIT} clean\nfiles\n{'z' * 64}  /x\n",
        "\x1b[31m1 " + COMMIT + " clean\nfiles\n",
    ],
)
def test_batched_read_refuses_an_answer_not_of_its_form(tmp_path: Path, output: str) -> None:
    with pytest.raises(ValueError, match="unexpected") as refused:
        _parse_files([project(tmp_path)], output)
    assert "\n" not in str(refused.value)


@given(st.text(max_size=2000))
def test_batched_read_of_any_text_parses_or_refuses_in_one_line(output: str) -> None:
    web = ComposeProject(
        Marquee.model_validate(
            {"name": "m", "host": "h", "user": "u", "identity_file": "/k", "known_hosts": "/n"}
        ),
        "web",
        "compose.yaml",
        ("docker-compose",),
    )
    try:
        files = _parse_files([web], output)
    except ValueError as exc:
        message = str(exc)
    else:
        message = ""
        assert set(files) == {"web"}
    assert "\n" not in message
    assert len(message) < 400


KEPT_ANSWERS = {
    "edge-1_web": ComposeAnswer(DIGEST, ("app", "db"), (("app", DIGEST), ("db", "c" * 64))),
    "edge-1_api": ComposeAnswer("d" * 64, (), ()),
}


def test_kept_answers_read_back_as_written() -> None:
    line = encode_kept(KEPT_ANSWERS)
    assert "\n" not in line
    assert parse_kept(line) == KEPT_ANSWERS


def entry(**changes: object) -> str:
    fields: dict[str, object] = {"inputs": DIGEST, "services": ["app"], "hashes": {"app": DIGEST}}
    return json.dumps({"version": 1, "projects": {"p": {**fields, **changes}}})


@pytest.mark.parametrize(
    "line",
    [
        "",
        "null",
        "[]",
        '{"version": 2, "projects": {}}',
        '{"version": 1, "projects": []}',
        entry(inputs="not a digest"),
        entry(inputs=DIGEST.upper()),
        entry(inputs=1),
        entry(services="app"),
        entry(services=[1]),
        entry(services=["a\nb"]),
        entry(services=["x" * 300]),
        entry(hashes=["app"]),
        entry(hashes={"app": 1}),
        entry(hashes={"app": "\x1b[31m"}),
        entry(hashes={"": DIGEST}),
        "[" * 100_000,
        "x" * (KEPT_LIMIT + 1),
    ],
)
def test_a_kept_line_not_of_the_written_form_holds_no_answer(line: str) -> None:
    assert parse_kept(line) == {}


def test_a_bad_entry_is_dropped_and_the_good_ones_kept() -> None:
    document = json.loads(encode_kept(KEPT_ANSWERS))
    document["projects"]["forged"] = {"inputs": "x"}
    assert parse_kept(json.dumps(document)) == KEPT_ANSWERS


@given(st.text(max_size=2000))
def test_any_kept_line_parses_to_answers_or_none_without_raising(line: str) -> None:
    kept = parse_kept(line)
    assert all(isinstance(answer, ComposeAnswer) for answer in kept.values())


def test_the_host_read_splits_the_files_from_the_kept_answers(tmp_path: Path) -> None:
    web = project(tmp_path, "web")
    files = f"1 {COMMIT} clean\nfiles\n{DIGEST}  {web.compose_path}\n"
    read = _parse_read([web], f"{files}kept\n{encode_kept(KEPT_ANSWERS)}\ntrailing\n")
    assert read.files["web"].head == COMMIT
    assert read.kept == KEPT_ANSWERS
    assert _parse_read([web], f"{files}kept\n").kept == {}
    with pytest.raises(ValueError, match="unexpected"):
        _parse_read([web], files)


class AskedCompose:
    """The part of a session ``ComposeState`` uses; its compose answers ``config --hash`` with
    ``hashes`` (fails when None), and each run is counted."""

    def __init__(self, marquee: Marquee, hashes: str | None) -> None:
        self.marquee = marquee
        self.compose_memo = ComposeMemo(4)
        self.hashes = hashes
        self.asked: list[list[str]] = []

    async def run(self, argv: list[str]) -> SimpleNamespace:
        self.asked.append(argv)
        if self.hashes is None:
            raise RemoteCommandFailed("edge-1", argv, 1, "no such file")
        return SimpleNamespace(stdout=self.hashes)


def compose_state(
    tmp_path: Path, hashes: str | None = "app a1\ndb d1\n"
) -> tuple[ComposeState, AskedCompose]:
    """Playground ``web``'s state in a cycle whose answer before ``up`` (services ``app`` and
    ``db``, both of hash ``old``) is remembered."""
    web = project(tmp_path, "web")
    session = AskedCompose(web.marquee, hashes)
    remote = cast(RemoteSession, session)
    files = PlaygroundFiles(git_present=True, head=COMMIT, changes="clean", digests={})
    asked = ComposeState(remote, web, files, "images", ["old-app", "old-db"])
    before = ComposeAnswer(asked._inputs(), ("app", "db"), (("app", "old"), ("db", "old")))
    session.compose_memo.put(("edge-1", web.name), before)
    return ComposeState(remote, web, files, "images", ["old-app", "old-db"]), session


def labels_of(service: str, config_hash: str, playground: str = "web") -> dict[str, str]:
    return {PLAYGROUND: playground, SERVICE_LABEL: service, CONFIG_HASH_LABEL: config_hash}


async def test_an_up_that_left_the_hashes_known_is_remembered_for_its_containers(
    tmp_path: Path,
) -> None:
    state, session = compose_state(tmp_path)
    before = state.answer
    assert before is not None

    await state.learn_after_up(
        {
            "new-app": labels_of("app", "old"),
            "new-db": labels_of("db", "old"),
            "chat": labels_of("", "", playground="another"),
        }
    )

    assert session.asked == [], "no compose run: the containers carry the hashes known"
    assert state.answer is not None
    assert state.answer.hashes == before.hashes
    assert state.answer.inputs != before.inputs, "for the containers up left"
    assert session.compose_memo.get(("edge-1", "pg-web"), state.answer.inputs) == state.answer


async def test_an_up_whose_labels_are_not_the_hashes_known_asks_compose_once(
    tmp_path: Path,
) -> None:
    """A label ``up`` left that is not the hash known (the override changed, or a container was
    replaced by hand since): compose's own answer, never the label."""
    state, session = compose_state(tmp_path)

    await state.learn_after_up(
        {"new-app": labels_of("app", "forged"), "new-db": labels_of("db", "old")}
    )

    assert [argv[-2:] for argv in session.asked] == [["config", "--hash=*"]]
    assert state.answer is not None
    assert state.answer.hashes == (("app", "a1"), ("db", "d1"))


async def test_an_up_whose_hashes_compose_does_not_give_is_not_remembered(tmp_path: Path) -> None:
    state, session = compose_state(tmp_path, hashes=None)
    before = state.answer

    await state.learn_after_up({"new-app": labels_of("app", "a1"), "new-db": labels_of("db", "d1")})

    assert len(session.asked) == 1
    assert state.answer == before
    assert len(session.compose_memo) == 1, "the answer before up alone"
