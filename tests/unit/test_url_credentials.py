"""Credentials in a URL the daemon is given are refused at load without being shown, or masked:
a generated marker token put into every URL-shaped setting and inventory field never appears in
the error, the settings' repr or their display forms (README "Secrets")."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from playguard_async.desired_state.model import InventoryError
from playguard_async.desired_state.yaml_source import YamlInventorySource
from playguard_async.settings import Settings, SettingsError, load_settings

MARKER = "MarkerT0ken"

# What people put around a token, the characters that fool URL parsers included.
_AROUND = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.~!$&'()*+,;=%#?@/:",
    max_size=12,
)
_USER = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=10)

CREDENTIAL_FORMS: dict[str, Callable[[str, str], str]] = {
    "https_user_password": lambda user, token: f"https://{user}:{token}@git.example.com/o/r.git",
    "https_token_as_user": lambda _, token: f"https://{token}@git.example.com/o/r.git",
    "http_user_password": lambda user, token: f"http://{user}:{token}@127.0.0.1:3000/o/r.git",
    "ssh_user_password": lambda user, token: f"ssh://{user}:{token}@git.example.com/o/r.git",
    "git_protocol_user": lambda _, token: f"git://{token}@git.example.com/o/r.git",
    "file_user": lambda _, token: f"file://{token}@/srv/git/r.git",
    "scp_user_password": lambda user, token: f"{user}:{token}@git.example.com:o/r.git",
}


def inventory_with_repo(repo: str) -> str:
    # JSON strings are YAML double-quoted scalars: any generated text survives quoting.
    return f"playspecs:\n  - name: app\n    repo: {json.dumps(repo)}\n"


def forms(secret: str) -> list[str]:
    """The token and the encodings it could leak in."""
    return [secret, quote(secret, safe="")]


async def refusal_of_repo(repo: str) -> str:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "inventory.yaml"
        path.write_text(inventory_with_repo(repo), encoding="utf-8")
        with pytest.raises(InventoryError) as refused:
            await YamlInventorySource(path).load()
    return str(refused.value)


@pytest.mark.parametrize("form", CREDENTIAL_FORMS.values(), ids=CREDENTIAL_FORMS.keys())
@settings(max_examples=40)
@given(user=_USER, before=_AROUND, after=_AROUND)
async def test_a_repo_url_with_credentials_is_refused_naming_the_field_never_the_token(
    form: Callable[[str, str], str], user: str, before: str, after: str
) -> None:
    error = await refusal_of_repo(form(user, f"{before}{MARKER}{after}"))
    assert len(error.splitlines()) == 1
    assert "playspecs[0].repo: must not carry credentials" in error
    assert "(value" not in error
    for shown in forms(MARKER):
        assert shown not in error


@pytest.mark.parametrize(
    "repo",
    [
        "https://git.example.com/o/r.git",
        "ssh://git@git.example.com/o/r.git",
        "ssh://git@git.example.com:2222/o/r.git",
        "git@git.example.com:o/r.git",
        "git.example.com:o/r.git",
        "file:///srv/git/r.git",
    ],
)
async def test_a_repo_url_without_credentials_is_taken(tmp_path: Path, repo: str) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(inventory_with_repo(repo), encoding="utf-8")
    inventory = await YamlInventorySource(path).load()
    assert inventory.playspecs[0].repo == repo


class UrlSetting(NamedTuple):
    field: str
    url: str  # with {token} where the credentials go
    refused_because: str | None  # a fragment of the refusal; None: taken, and masked
    shown: Callable[[Settings], str]  # the display form operators see when taken


URL_SETTINGS = {
    "redis_url": UrlSetting(
        "redis_url", "redis://app:{token}@127.0.0.1:6379/0", None, Settings.redis_url_for_display
    ),
    "redis_url_malformed": UrlSetting(
        "redis_url", "http://app:{token}@127.0.0.1:6379/0", "redis_url", str
    ),
    "desired_state": UrlSetting(
        "desired_state",
        "postgresql://app:{token}@127.0.0.1/fleet",
        "must not carry a password",
        str,
    ),
    "otlp_endpoint": UrlSetting(
        "otlp_endpoint", "https://app:{token}@collector.example/v1/traces", "no credentials", str
    ),
    "webhook_url": UrlSetting(
        "webhook_url",
        "https://hooks.example/services/{token}",
        None,
        lambda taken: str(taken.webhook_url),
    ),
}


@pytest.mark.parametrize("case", URL_SETTINGS.values(), ids=URL_SETTINGS.keys())
@pytest.mark.parametrize("route", ["environment", "file"])
@settings(max_examples=25)
@given(before=_AROUND.filter(lambda text: "@" not in text and "/" not in text))
def test_a_url_setting_with_credentials_is_refused_unshown_or_masked(
    case: UrlSetting, route: str, before: str
) -> None:
    token = quote(f"{before}{MARKER}", safe="")
    url = case.url.format(token=token)
    variable = f"PLAYGUARD_{case.field.upper()}"
    saved = {
        name: os.environ.pop(name) for name in list(os.environ) if name.startswith("PLAYGUARD_")
    }
    try:
        with tempfile.TemporaryDirectory() as directory:
            config = Path(directory) / "playguard.toml"
            config.write_text(
                f"{case.field} = {json.dumps(url)}\n" if route == "file" else "", encoding="utf-8"
            )
            if route == "environment":
                os.environ[variable] = url
            if case.refused_because is not None:
                with pytest.raises(SettingsError) as refused:
                    load_settings(config)
                texts = [str(refused.value)]
                assert case.refused_because in texts[0]
                assert case.field in texts[0]
            else:
                taken = load_settings(config)
                texts = [repr(taken), str(taken), case.shown(taken)]
    finally:
        os.environ.pop(variable, None)
        os.environ.update(saved)
    for text in texts:
        for shown in forms(MARKER):
            assert shown not in text
