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


def clean(text: str) -> str:
    """``text`` with every control character but newline and tab written as ``\\xNN``."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match[0]):02x}", text)


def host_line(text: str, *, secrets: Iterable[str] = (), limit: int = LINE_LIMIT) -> str:
    """The last non-blank line of ``text`` (host output: a health check's, a container's log) on
    one line: terminal markup removed, each of ``secrets`` masked, other control characters
    written out, cut to ``limit`` characters (``...`` marks the cut). Only the end of a huge text
    is looked at, so a megabyte line costs no more than a short one."""
    tail = text[-(limit * 8 + 64) :]
    lines = [line for line in _TERMINAL_MARKUP.sub("", tail).splitlines() if line.strip()]
    line = " ".join(lines[-1].split()) if lines else ""
    for secret in secrets:
        if secret:
            line = line.replace(secret, "***")
    line = clean(line)
    return line if len(line) <= limit else line[: limit - 3] + "..."
