"""The inventory: the shipped example, every validation rule, error messages, passwords, lookups."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import pytest
from pydantic import ValidationError

from playguard_async.desired_state.model import Inventory, InventoryError
from playguard_async.desired_state.source import DesiredState
from playguard_async.desired_state.yaml_source import YamlInventorySource

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "inventory.yaml"
TOKEN_ENV = "PLAYGUARD_TEST_REGISTRY_TOKEN"
SECRET = "s3cr3t-never-shown"

VALID = f"""\
marquees:
  - name: m1
    host: m1.example.com
    user: pg
    identity_file: keys/id
    known_hosts: keys/known_hosts
  - name: m2
    host: 192.0.2.7
    user: pg
    identity_file: /k/id
    known_hosts: /k/known_hosts
    launchable: false
registries:
  - name: reg
    server: registry.example.com:5000
    username: bot
    password_env: {TOKEN_ENV}
playspecs:
  - name: app
    repo: https://git.example.com/app.git
    images: [registry.example.com:5000/app:1]
    registry: reg
playgrounds:
  - name: pg-a
    playspec: app
    marquee: m1
    branch: main
    expires_at: 2030-01-01T00:00:00Z
  - name: pg-b
    playspec: app
    marquee: m2
    branch: feature/x
agent_chats:
  - name: chat-a
    playground: pg-a
    image: agent:1
    command: [run]
  - name: chat-b
    playground: pg-b
    image: agent:1
    command: [run, --fast]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(text, encoding="utf-8")
    return path


async def load(tmp_path: Path, text: str) -> Inventory:
    return await YamlInventorySource(write(tmp_path, text)).load()


async def rejection(path: Path) -> InventoryError:
    with pytest.raises(InventoryError) as caught:
        await YamlInventorySource(path).load()
    return caught.value


def last_line_with(text: str, needle: str) -> int:
    return max(number for number, line in enumerate(text.splitlines(), 1) if needle in line)


async def test_shipped_example_loads() -> None:
    source: DesiredState = YamlInventorySource(EXAMPLE)
    inventory = await source.load()
    assert source.describe() == str(EXAMPLE)
    assert len(inventory.marquees) == 2
    assert len(inventory.registries) == 1
    assert len(inventory.playspecs) == 2
    assert len(inventory.playgrounds) >= 2
    assert len(inventory.agent_chats) == 1


async def test_valid_inventory_loads_with_defaults_and_aware_expiry(tmp_path: Path) -> None:
    inventory = await load(tmp_path, VALID)
    m1 = inventory.marquee("m1")
    assert (m1.port, m1.docker_socket, m1.workdir, m1.launchable) == (
        22,
        "/var/run/docker.sock",
        "/srv/playguard",
        True,
    )
    assert inventory.playspecs[0].compose_file == "compose.yaml"
    assert inventory.playgrounds[0].state == "running"
    assert inventory.playgrounds[0].expires_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert inventory.agent_chats[0].state == "active"


async def test_relative_local_paths_resolve_against_the_inventory_directory(
    tmp_path: Path,
) -> None:
    inventory = await load(tmp_path, VALID)
    assert inventory.marquee("m1").identity_file == tmp_path / "keys" / "id"
    assert inventory.marquee("m1").known_hosts == tmp_path / "keys" / "known_hosts"
    assert inventory.marquee("m2").identity_file == Path("/k/id")


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "marquees:\nplaygrounds: []\n"])
async def test_empty_file_and_missing_or_null_lists_are_empty(tmp_path: Path, text: str) -> None:
    assert await load(tmp_path, text) == Inventory()


class Rejection(NamedTuple):
    old: str  # replace this text of VALID
    new: str  # with this
    line_with: str  # the problem is reported on the last line containing this
    place: str
    reason: str  # a fragment of the reason
    value: str | int | None  # the value shown, or None when none may be


REJECTIONS = {
    "bad_name": Rejection(
        "  - name: m2", "  - name: M_2", "M_2", "marquees[1].name", "lowercase", "M_2"
    ),
    "duplicate_name": Rejection(
        "  - name: pg-b",
        "  - name: pg-a",
        "name: pg-a",
        "playgrounds[1].name",
        "duplicate name, first used by playgrounds[0]",
        "pg-a",
    ),
    "unresolved_marquee": Rejection(
        "    marquee: m2",
        "    marquee: m3",
        "marquee: m3",
        "playgrounds[1].marquee",
        "no entry in marquees has this name",
        "m3",
    ),
    "unresolved_playspec": Rejection(
        "    playspec: app\n    marquee: m2",
        "    playspec: ap\n    marquee: m2",
        "playspec: ap",
        "playgrounds[1].playspec",
        "no entry in playspecs has this name",
        "ap",
    ),
    "unresolved_playground": Rejection(
        "    playground: pg-b",
        "    playground: pg-c",
        "pg-c",
        "agent_chats[1].playground",
        "no entry in playgrounds has this name",
        "pg-c",
    ),
    "unresolved_registry": Rejection(
        "    registry: reg",
        "    registry: other",
        "registry: other",
        "playspecs[0].registry",
        "no entry in registries has this name",
        "other",
    ),
    "branch_shell_injection": Rejection(
        "    branch: feature/x",
        "    branch: 'main;touch /tmp/pwned'",
        "pwned",
        "playgrounds[1].branch",
        "may only contain letters, digits",
        "main;touch /tmp/pwned",
    ),
    "branch_option": Rejection(
        "    branch: feature/x",
        "    branch: -x",
        "branch: -x",
        "playgrounds[1].branch",
        "must not start with '-'",
        "-x",
    ),
    "branch_dot_dot": Rejection(
        "    branch: feature/x",
        "    branch: a..b",
        "a..b",
        "playgrounds[1].branch",
        "'..'",
        "a..b",
    ),
    "branch_lock": Rejection(
        "    branch: feature/x",
        "    branch: x.lock",
        "x.lock",
        "playgrounds[1].branch",
        "'.lock'",
        "x.lock",
    ),
    "branch_hidden_component": Rejection(
        "    branch: feature/x",
        "    branch: feature/.x",
        "feature/.x",
        "playgrounds[1].branch",
        "may start with '.'",
        "feature/.x",
    ),
    "branch_double_slash": Rejection(
        "    branch: feature/x",
        "    branch: feature//x",
        "feature//x",
        "playgrounds[1].branch",
        "'//'",
        "feature//x",
    ),
    "branch_trailing_dot": Rejection(
        "    branch: feature/x",
        "    branch: x.",
        "branch: x.",
        "playgrounds[1].branch",
        "must not end with '.'",
        "x.",
    ),
    "branch_reflog_syntax": Rejection(
        "    branch: feature/x",
        "    branch: x@{1}",
        "x@{1}",
        "playgrounds[1].branch",
        "may only contain",
        "x@{1}",
    ),
    "naive_expires_at": Rejection(
        "    branch: feature/x",
        "    branch: feature/x\n    expires_at: 2030-01-01T00:00:00",
        "expires_at",
        "playgrounds[1].expires_at",
        "timezone",
        "2030-01-01T00:00:00",
    ),
    "unknown_state": Rejection(
        "    branch: feature/x",
        "    branch: feature/x\n    state: paused",
        "paused",
        "playgrounds[1].state",
        "'running' or 'stopped'",
        "paused",
    ),
    "both_password_sources": Rejection(
        f"    password_env: {TOKEN_ENV}",
        f"    password_env: {TOKEN_ENV}\n    password_file: token.txt",
        "name: reg",
        "registries[0]",
        "set exactly one of password_file and password_env",
        None,
    ),
    "no_password_source": Rejection(
        f"    password_env: {TOKEN_ENV}",
        "",
        "name: reg",
        "registries[0]",
        "set exactly one of password_file and password_env",
        None,
    ),
    "absolute_compose_file": Rejection(
        "    registry: reg",
        "    registry: reg\n    compose_file: /etc/compose.yaml",
        "compose_file",
        "playspecs[0].compose_file",
        "must be a relative path",
        "/etc/compose.yaml",
    ),
    "escaping_compose_file": Rejection(
        "    registry: reg",
        "    registry: reg\n    compose_file: deploy/../../compose.yaml",
        "compose_file",
        "playspecs[0].compose_file",
        "must not contain '..'",
        "deploy/../../compose.yaml",
    ),
    "relative_workdir": Rejection(
        "    launchable: false",
        "    launchable: false\n    workdir: srv/pg",
        "workdir",
        "marquees[1].workdir",
        "must be an absolute path",
        "srv/pg",
    ),
    "unknown_field": Rejection(
        "    launchable: false",
        "    launchabel: false",
        "launchabel",
        "marquees[1].launchabel",
        "Extra inputs are not permitted",
        None,
    ),
    "missing_field": Rejection(
        "    user: pg\n    identity_file: /k/id",
        "    identity_file: /k/id",
        "name: m2",
        "marquees[1].user",
        "Field required",
        None,
    ),
    "bad_host": Rejection(
        "    host: 192.0.2.7",
        "    host: 'm2;reboot'",
        "reboot",
        "marquees[1].host",
        "hostname or an IP address",
        "m2;reboot",
    ),
    "bad_port": Rejection(
        "    launchable: false",
        "    launchable: false\n    port: 70000",
        "70000",
        "marquees[1].port",
        "less than or equal to 65535",
        70000,
    ),
    "bad_server": Rejection(
        "    server: registry.example.com:5000",
        "    server: registry.example.com:99999",
        "99999",
        "registries[0].server",
        "port must be in 1..65535",
        "registry.example.com:99999",
    ),
    "git_command_transport": Rejection(
        "    repo: https://git.example.com/app.git",
        "    repo: ext::sh",
        "ext::sh",
        "playspecs[0].repo",
        "must be a git URL",
        "ext::sh",
    ),
    "git_option": Rejection(
        "    repo: https://git.example.com/app.git",
        "    repo: --upload-pack=touch",
        "upload-pack",
        "playspecs[0].repo",
        "must be a git URL",
        "--upload-pack=touch",
    ),
    "bad_image": Rejection(
        "    image: agent:1\n    command: [run, --fast]",
        "    image: 'agent:1 --privileged'\n    command: [run, --fast]",
        "privileged",
        "agent_chats[1].image",
        "image reference",
        "agent:1 --privileged",
    ),
    "bad_env_name": Rejection(
        f"    password_env: {TOKEN_ENV}",
        "    password_env: MY-TOKEN",
        "MY-TOKEN",
        "registries[0].password_env",
        "environment variable name",
        "MY-TOKEN",
    ),
    "not_a_list": Rejection(
        "    command: [run]",
        "    command: run",
        "command: run",
        "agent_chats[0].command",
        "valid list",
        "run",
    ),
}


@pytest.mark.parametrize("case", REJECTIONS.values(), ids=REJECTIONS.keys())
async def test_invalid_inventory_is_rejected_naming_file_line_place_and_value(
    tmp_path: Path, case: Rejection
) -> None:
    assert case.old in VALID
    text = VALID.replace(case.old, case.new, 1)
    path = write(tmp_path, text)
    error = await rejection(path)
    prefix = f"{path}:{last_line_with(text, case.line_with)}: {case.place}: "
    [problem] = [line for line in error.problems if line.startswith(prefix)]
    assert case.reason in problem
    if case.value is None:
        assert "(value" not in problem
    else:
        assert problem.endswith(f"(value {case.value!r})")


async def test_each_problem_is_one_line(tmp_path: Path) -> None:
    text = VALID.replace("  - name: m2", "  - name: M2").replace("branch: main", "branch: a..b")
    path = write(tmp_path, text)
    error = await rejection(path)
    assert len(error.problems) == 2
    assert str(error).splitlines() == list(error.problems)
    assert all(problem.startswith(f"{path}:") for problem in error.problems)


async def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "marquees:\n  - name: m1\n   host: x\n")
    error = await rejection(path)
    assert str(error).startswith(f"{path}:3: invalid YAML: ")


async def test_duplicate_yaml_key_is_an_error_not_an_overwrite(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("    user: pg\n", "    user: pg\n    user: root\n", 1))
    error = await rejection(path)
    assert str(error).startswith(f"{path}:5: invalid YAML: found duplicate key 'user'")


async def test_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    error = await rejection(path)
    assert str(error) == f"{path}: cannot read inventory: No such file or directory"


async def test_unknown_field_never_echoes_its_value(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("    username: bot", f"    password: {SECRET}"))
    error = await rejection(path)
    assert "registries[0].password: Extra inputs are not permitted" in str(error)
    assert SECRET not in str(error)


async def test_password_read_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, f" {SECRET}\n")
    registry = (await load(tmp_path, VALID)).registries[0]
    assert registry.password().get_secret_value() == SECRET


async def test_password_read_from_file_relative_to_inventory(tmp_path: Path) -> None:
    (tmp_path / "token.txt").write_text(f"{SECRET}\n", encoding="utf-8")
    text = VALID.replace(f"password_env: {TOKEN_ENV}", "password_file: token.txt")
    registry = (await load(tmp_path, text)).registries[0]
    assert registry.password_file == tmp_path / "token.txt"
    assert registry.password().get_secret_value() == SECRET


async def test_absent_env_password_names_registry_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    registry = (await load(tmp_path, VALID)).registries[0]
    with pytest.raises(InventoryError) as caught:
        registry.password()
    assert str(caught.value) == (
        f"registry 'reg': environment variable {TOKEN_ENV} is missing or empty"
    )


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "cannot read password file"), ("\n", "is missing or empty")],
    ids=["absent", "empty"],
)
async def test_unusable_password_file_names_registry_and_file(
    tmp_path: Path, content: str | None, reason: str
) -> None:
    token = tmp_path / "token.txt"
    if content is not None:
        token.write_text(content, encoding="utf-8")
    text = VALID.replace(f"password_env: {TOKEN_ENV}", "password_file: token.txt")
    registry = (await load(tmp_path, text)).registries[0]
    with pytest.raises(InventoryError) as caught:
        registry.password()
    assert str(caught.value).startswith("registry 'reg': ")
    assert reason in str(caught.value)
    assert str(token) in str(caught.value)


async def test_repr_never_contains_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    inventory = await load(tmp_path, VALID)
    password = inventory.registries[0].password()
    for shown in (repr(inventory.registries[0]), repr(inventory), str(inventory), repr(password)):
        assert SECRET not in shown


async def test_launchable_marquees_skip_draining_ones(tmp_path: Path) -> None:
    inventory = await load(tmp_path, VALID)
    assert [marquee.name for marquee in inventory.launchable_marquees()] == ["m1"]


async def test_lookups_per_marquee_follow_chat_to_playground_to_marquee(tmp_path: Path) -> None:
    inventory = await load(tmp_path, VALID)
    assert inventory.marquee("m2").host == "192.0.2.7"
    assert [playground.name for playground in inventory.playgrounds_on("m1")] == ["pg-a"]
    assert [chat.name for chat in inventory.agent_chats_on("m1")] == ["chat-a"]
    assert [chat.name for chat in inventory.agent_chats_on("m2")] == ["chat-b"]
    assert inventory.playgrounds_on("gone") == []
    with pytest.raises(KeyError, match="gone"):
        inventory.marquee("gone")


def fleet(*, registries: list[str], base: str = "base:1") -> Inventory:
    """Two Marquees; playspecs naming the registries in the order given (a registry-less one
    too), so what a Marquee needs from them shows its order and its sharing; those playspecs
    spell the shared image ``base``."""
    marquee = {"user": "pg", "identity_file": "/k/id", "known_hosts": "/k/kh"}
    return Inventory.model_validate(
        {
            "marquees": [
                {"name": "m1", "host": "m1.example", **marquee},
                {"name": "m2", "host": "m2.example", **marquee},
            ],
            "registries": [
                {"name": name, "server": f"{name}.example", "username": "u", "password_env": "P"}
                for name in ("r-first", "r-second")
            ],
            "playspecs": [
                {"name": "plain", "repo": "https://g.example/p.git", "images": ["base:1"]},
                *(
                    {
                        "name": f"s-{registry}",
                        "repo": "https://g.example/s.git",
                        "images": [f"{registry}.example/app:1", base],
                        "registry": registry,
                    }
                    for registry in registries
                ),
            ],
            "playgrounds": [
                {"name": "pg-plain", "playspec": "plain", "marquee": "m1", "branch": "main"},
                *(
                    {
                        "name": f"pg-{registry}",
                        "playspec": f"s-{registry}",
                        "marquee": "m1",
                        "branch": "main",
                    }
                    for registry in registries
                ),
                {"name": "pg-other", "playspec": "plain", "marquee": "m2", "branch": "main"},
            ],
            "agent_chats": [
                {"name": "chat-1", "playground": "pg-plain", "image": "a:1", "command": []},
                {"name": "chat-2", "playground": "pg-other", "image": "a:1", "command": []},
            ],
        }
    )


def test_registries_on_keep_inventory_order_whatever_order_the_playgrounds_use() -> None:
    inventory = fleet(registries=["r-second", "r-first"])
    assert [registry.name for registry in inventory.registries_on("m1")] == ["r-first", "r-second"]
    assert inventory.registries_on("m2") == []
    assert inventory.registries_on("unknown") == []


def test_images_on_a_marquee_appear_once_with_the_registry_of_their_first_playspec() -> None:
    inventory = fleet(registries=["r-second", "r-first"])
    needed = {image: r and r.name for image, r in inventory.images_on("m1").items()}
    assert needed == {
        "base:1": None,
        "r-second.example/app:1": "r-second",
        "r-first.example/app:1": "r-first",
    }
    assert inventory.images_on("m2") == {"base:1": None}


def test_an_image_spelt_two_ways_is_pulled_once_under_its_first_spelling() -> None:
    inventory = fleet(registries=["r-first"], base="index.docker.io/library/base:1")
    assert list(inventory.images_on("m1")) == ["base:1", "r-first.example/app:1"]


def test_references_resolve_through_the_index() -> None:
    inventory = fleet(registries=["r-first"])
    chat = inventory.agent_chats[0]
    assert inventory.playground_of(chat).name == "pg-plain"
    playspec = inventory.playspec_of(inventory.playground_of(chat))
    assert (playspec.name, inventory.registry_of(playspec)) == ("plain", None)
    registry = inventory.registry_of(inventory.playspec_of(inventory.playgrounds[1]))
    assert registry is not None
    assert registry.name == "r-first"


@pytest.mark.parametrize(
    ("marquee", "playground", "chat", "wanted"),
    [
        ("m1", "pg-plain", "chat-1", True),
        ("m2", "pg-plain", "chat-1", False),
        ("m2", "pg-other", "chat-2", True),
        ("m1", "pg-other", "chat-2", False),
        ("m1", "pg-unknown", "chat-unknown", False),
        ("unknown", "pg-plain", "chat-1", False),
    ],
)
def test_an_owner_is_wanted_only_on_the_marquee_of_its_playground(
    marquee: str, playground: str, chat: str, wanted: bool
) -> None:
    inventory = fleet(registries=[])
    assert inventory.wants_playground(marquee, playground) is wanted
    assert inventory.wants_agent_chat(marquee, chat) is wanted


def test_a_copy_answers_for_its_own_lists_not_the_originals() -> None:
    inventory = fleet(registries=[])
    assert [pg.name for pg in inventory.playgrounds_on("m2")] == ["pg-other"]
    moved = [pg.model_copy(update={"marquee": "m2"}) for pg in inventory.playgrounds]
    copied = inventory.model_copy(update={"playgrounds": moved})
    assert len(copied.playgrounds_on("m2")) == len(moved)
    assert copied.playgrounds_on("m1") == []
    assert [pg.name for pg in inventory.playgrounds_on("m2")] == ["pg-other"]


def test_answers_are_copies_a_caller_may_change() -> None:
    inventory = fleet(registries=[])
    inventory.playgrounds_on("m1").clear()
    inventory.agent_chats_on("m1").clear()
    assert [pg.name for pg in inventory.playgrounds_on("m1")] == ["pg-plain"]
    assert [chat.name for chat in inventory.agent_chats_on("m1")] == ["chat-1"]


async def test_models_are_frozen(tmp_path: Path) -> None:
    inventory = await load(tmp_path, VALID)
    with pytest.raises(ValidationError):
        inventory.marquees[0].host = "elsewhere"
