"""A Playspec's ``repo``: a URL git is given as is, so its form is checked, and it carries no
credentials.

The URL reaches the clone action's text, spans, ``remote.change`` log lines, the host journal and
the cycle records; a token in it would reach all of them. Masking each of those places is a promise
broken by the next one added, so a URL holding a password or a token is refused at load instead,
naming the field but never the value: credentials belong to the Marquee, in git's credential
helper or an SSH deploy key (docs, operations/security.md).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

# scp-like "user@host:path" must not start its path with ':' so that "ext::cmd" (git's command
# transport) is refused; nothing may start with '-' or it would read as an option to git.
_GIT_URL = re.compile(
    r"(?:(?:https?|ssh|git|file)://|(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!:))"
    r"[^\s\x00-\x1f\x7f]+"
)

_SCHEME = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")


class CredentialsInUrl(ValueError):
    """A URL carries a password or token; the message says where they belong, and the value is
    never shown with it (``model._shown_value``)."""


def _check_git_url(value: str) -> str:
    """Refuse credentials first, whatever else is wrong, so that no later message shows them.

    What comes before the URL's last ``@`` is read as its user part, as ``mask_url`` reads it: a
    password may hold ``/``, ``#`` or ``@``, which fool a URL parser. Refused: any user part but
    in an ssh:// or scp-like URL (``https://TOKEN@host`` is a token to GitHub and GitLab), and
    there any holding ``:`` (a password). Kept: an SSH user name (``ssh://git@host/...``,
    ``git@host:path``), which authenticates nothing by itself. A path holding ``@`` (any in an
    https:// URL, one after a ``:`` in an SSH one) is refused too: rare, and safer than guessing
    where a password ends.
    """
    scheme = _SCHEME.match(value)
    rest = value[scheme.end() :] if scheme else value
    userinfo, at, _ = rest.rpartition("@")
    ssh = scheme is None or scheme["scheme"].lower() == "ssh"
    if at and (not ssh or ":" in userinfo):
        raise CredentialsInUrl(
            "must not carry credentials: give the Marquee git's credential helper or an SSH "
            "deploy key (ssh://git@host/repo.git) instead"
        )
    if not _GIT_URL.fullmatch(value):
        raise ValueError("must be a git URL: https://, ssh://, git://, file:// or [user@]host:path")
    return value


GitUrl = Annotated[str, AfterValidator(_check_git_url)]
