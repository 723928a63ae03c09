"""The web users file is refused at start unless it is a regular file only its owner may
read or write, named itself (not through a symbolic link); and the settings beside it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from playguard_async.settings import SettingsError, load_settings
from playguard_async.web.users import read_users
from tests.support.web_users import CHEAP

ACCEPTED_MODES = [0o600, 0o400, 0o200, 0o700, 0o500, 0o610, 0o601, 0o611]
REFUSED_MODES = [0o640, 0o620, 0o660, 0o604, 0o602, 0o606, 0o644, 0o664, 0o666, 0o777, 0o444]


def credential_file(tmp_path: Path, mode: int) -> Path:
    path = tmp_path / "credential"
    path.write_text(f"ops viewer {CHEAP.hash('s3cret')}\n")
    path.chmod(mode)
    return path


def credential_of(path: Path) -> set[str]:
    """The names of the users file of ``web_credential_file`` = ``path``, as the daemon reads it."""
    settings = load_settings(http_address="127.0.0.1:0", web_credential_file=path)
    assert settings.web_credential_file is not None
    return set(read_users(settings.web_credential_file)[0])


def test_only_a_file_no_group_or_other_may_read_or_write_is_accepted(tmp_path: Path) -> None:
    refusals: dict[int, bool | str] = {}
    for mode in ACCEPTED_MODES + REFUSED_MODES:
        path = credential_file(tmp_path, mode)
        try:
            refusals[mode] = credential_of(path) != {"ops"}
        except SettingsError as exc:
            refusals[mode] = str(exc)
    assert refusals == {
        **{mode: False for mode in ACCEPTED_MODES},
        **{
            mode: f"web_credential_file {tmp_path / 'credential'}: mode {mode:04o} lets group or "
            "others read or write it: chmod 600 it"
            for mode in REFUSED_MODES
        },
    }


def test_only_a_regular_file_named_itself_is_read(tmp_path: Path) -> None:
    target = credential_file(tmp_path, 0o600)
    link = tmp_path / "link"
    link.symlink_to(target)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "absent")
    directory = tmp_path / "directory"
    directory.mkdir(mode=0o700)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    refusals = {}
    for path in (link, dangling, directory, fifo, Path("/dev/null")):
        with pytest.raises(SettingsError) as refused:
            credential_of(path)
        refusals[path.name] = str(refused.value).removeprefix(f"web_credential_file {path}: ")
    assert refusals == {
        "link": "a symbolic link: name the file itself",
        "dangling": "a symbolic link: name the file itself",
        "directory": "not a regular file",
        "fifo": "not a regular file",
        "null": "not a regular file",
    }


def test_the_mode_is_judged_on_the_file_opened_not_on_a_second_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A check by name (stat, lstat, os.access) and a read by name would race a swap between them.
    path = credential_file(tmp_path, 0o644)

    def no_second_look(*args: object, **kwargs: object) -> os.stat_result:
        raise AssertionError("looked the file up by name again")

    with monkeypatch.context() as patched:  # undone before a failure is reported (which stats)
        for name in ("stat", "lstat", "access"):
            patched.setattr(os, name, no_second_look)
        with pytest.raises(SettingsError, match="mode 0644"):
            read_users(path)


@pytest.mark.parametrize(
    ("allowed", "kept"),
    [
        (["Ops.Example"], ("ops.example",)),
        (["10.0.0.5", "::1", "playguard"], ("10.0.0.5", "::1", "playguard")),
        ([], ()),
    ],
)
def test_allowed_hosts_are_names_or_addresses(allowed: list[str], kept: tuple[str, ...]) -> None:
    assert load_settings(http_allowed_hosts=allowed).http_allowed_hosts == kept


@pytest.mark.parametrize(
    "entry", ["ops.example:9464", "[::1]", "*.example", "a b", "", "ops.example.", "ünï.example"]
)
def test_an_allowed_host_with_a_port_wildcard_or_odd_characters_is_refused(entry: str) -> None:
    with pytest.raises(SettingsError, match=r"http_allowed_hosts.*neither a DNS name nor an IP"):
        load_settings(http_allowed_hosts=[entry])


def test_metrics_can_require_the_credential_only_with_one_set(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="metrics_require_credential needs web_credential_file"):
        load_settings(http_address="0.0.0.0:9464", web_view=False, metrics_require_credential=True)
    settings = load_settings(
        http_address="0.0.0.0:9464",
        web_view=False,
        metrics_require_credential=True,
        web_credential_file=credential_file(tmp_path, 0o600),
    )
    assert settings.metrics_require_credential is True
    assert load_settings().metrics_require_credential is False
