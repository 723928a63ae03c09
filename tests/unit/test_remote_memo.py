"""Pure logic of the remote layer's memory: the compose memo's bounds, the pool's connection key,
and the parsing of the batched host read, hostile answers included."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.desired_state.inventory import Marquee
from playguard_async.remote.compose import ComposeProject
from playguard_async.remote.host_state import _parse_files
from playguard_async.remote.memo import ComposeAnswer, ComposeMemo
from playguard_async.remote.pool import connection_key

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
