"""Text from elsewhere (a host, a container) made fit to show a person: no control characters
sent to the terminal, no terminal markup, no known secret, bounded."""

from __future__ import annotations

import re
from collections.abc import Iterable

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

# ANSI escape sequences: CSI (colours, cursor moves), OSC (titles, hyperlinks; ended by BEL or
# ST) and the two-character ones. Removed whole, so no half of one is left to be escaped.
_TERMINAL_MARKUP = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]"
)

LINE_LIMIT = 300
"""Characters a line of host output shown in a finding keeps at most."""

MASK = "***"

PARTIAL_SECRET = 4
"""Characters of a secret, cut at an edge of the text by whoever cut it (Docker keeps 4 KiB of a
health check's output), from which the piece is masked like the whole secret. Shorter pieces are
shown: three characters say little, and masking every trailing letter that a secret starts with
would garble ordinary output."""


def clean(text: str) -> str:
    """``text`` with every control character but newline and tab written as ``\\xNN``."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match[0]):02x}", text)


def host_line(text: str, *, secrets: Iterable[str] = (), limit: int = LINE_LIMIT) -> str:
    """The last non-blank line of ``text`` (host output: a health check's, a container's log) on
    one line: terminal markup removed, each of ``secrets`` masked, other control characters
    written out, cut to ``limit`` characters (``...`` marks the cut). Only the end of a huge text
    is looked at, so a megabyte line costs no more than a short one.

    Secrets are masked before any cut, so no cut can leave a piece of one: the text looked at
    reaches back one secret's length further than the tail kept, and a secret's start or end that
    the text arrived cut at (from ``PARTIAL_SECRET`` characters) is masked too."""
    secrets = [secret for secret in secrets if secret]
    reach = tail_reach(limit)
    longest = max((len(secret) for secret in secrets), default=0)
    tail = text[-(reach + longest) :]
    tail = _mask_cut_edges(_mask(tail, secrets), secrets, starts_cut=len(tail) < len(text))
    lines = [line for line in _TERMINAL_MARKUP.sub("", tail[-reach:]).splitlines() if line.strip()]
    line = " ".join(lines[-1].split()) if lines else ""
    # Removing markup and runs of blanks can join a secret that was written in pieces.
    line = clean(_mask(line, [*secrets, *(" ".join(secret.split()) for secret in secrets)]))
    return line if len(line) <= limit else line[: limit - 3] + "..."


def tail_reach(limit: int = LINE_LIMIT) -> int:
    """Characters from the end of a host's text that ``host_line`` keeps before it looks for the
    last line: room for ``limit`` shown characters after markup and blanks are taken out."""
    return limit * 8 + 64


def _mask(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


def _mask_cut_edges(text: str, secrets: Iterable[str], *, starts_cut: bool) -> str:
    """``text`` with a secret's beginning at its end, and (unless we cut its start ourselves,
    reaching far enough back) a secret's end at its start, masked."""
    for secret in secrets:
        for size in range(len(secret) - 1, PARTIAL_SECRET - 1, -1):
            if text.endswith(secret[:size]):
                text = text[:-size] + MASK
                break
        if starts_cut:
            continue
        for size in range(len(secret) - 1, PARTIAL_SECRET - 1, -1):
            if text.startswith(secret[-size:]):
                text = MASK + text[size:]
                break
    return text
