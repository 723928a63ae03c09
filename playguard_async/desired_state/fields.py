"""The field types of the desired state's model: names, branches, paths, hosts, image references,
environment variable names and local paths, each a validated ``str`` or ``Path``.

Values that end up in remote commands are restricted to shell-inert characters here, so a hostile
or careless inventory cannot inject commands (``model``'s doc). Kept apart from the models so that
each can be read in one sitting.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, cast

from pydantic import (
    AfterValidator,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

# Validation context key: the directory that relative local paths are resolved against.
BASE_DIR = "base_dir"


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
    base_dir: Path = info.context[BASE_DIR]
    return base_dir / value


# Validation context key: the local paths one validation has resolved, by the text it was given.
PATHS_RESOLVED = "paths_resolved"


def _remembered_local_path(
    value: object, resolve: ValidatorFunctionWrapHandler, info: ValidationInfo
) -> Path:
    """Resolve each distinct path text once per validation: ten thousand Marquees name the same
    two key files, and a ``Path`` costs more to make than the rest of a Marquee's checks. A
    ``Path`` is immutable, so Marquees may share one; a text that fails is not remembered, so it
    fails again in every place it appears."""
    paths: dict[str, Path] | None = info.context.get(PATHS_RESOLVED) if info.context else None
    if paths is None or type(value) is not str:
        return cast(Path, resolve(value))
    path = paths.get(value)
    if path is None:
        path = paths[value] = resolve(value)
    return path


LocalPath = Annotated[
    Path, AfterValidator(_resolve_local_path), WrapValidator(_remembered_local_path)
]
