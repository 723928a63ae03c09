"""Durations as people type them (``90s``, ``15m``, ``2h``, ``1h30m``, ``1d``): one reading for
the command line's options and the web view's query parameters, so ``--since 2h`` and
``?since=2h`` mean the same."""

from __future__ import annotations

import re

from playguard_async.kits.capacity import MAX_SECONDS

_SPAN = re.compile(r"(?:(?P<d>[0-9]{1,3})d)?(?:(?P<h>[0-9]{1,4})h)?(?:(?P<m>[0-9]{1,5})m)?"
                   r"(?:(?P<s>[0-9]{1,6})s)?")  # fmt: skip
_SPAN_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}

SPAN_EXAMPLES = "like 90s, 15m, 2h, 1h30m, 1d"


def span_seconds(text: str) -> float | None:
    """``text`` as seconds; None when it is no duration above zero and up to 7 days (a bound
    every duration shares: ``MAX_SECONDS``)."""
    match = _SPAN.fullmatch(text.strip())
    seconds = 0.0 if match is None else sum(
        int(count) * _SPAN_SECONDS[unit] for unit, count in match.groupdict().items() if count
    )  # fmt: skip
    return seconds if 0 < seconds <= MAX_SECONDS else None
