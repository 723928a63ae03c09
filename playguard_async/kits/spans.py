"""Durations as people type them (``90s``, ``15m``, ``2h``, ``1h30m``, ``1d``): one reading for
the command line's options, the web view's actions and its query parameters, so ``--since 2h``
and ``?since=2h`` mean the same."""

from __future__ import annotations

import re

from playguard_async.kits.capacity import MAX_SECONDS

_SPAN = re.compile(r"(?:(?P<d>[0-9]{1,3})d)?(?:(?P<h>[0-9]{1,4})h)?(?:(?P<m>[0-9]{1,5})m)?"
                   r"(?:(?P<s>[0-9]{1,6})s)?")  # fmt: skip
_SPAN_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def span_seconds(value: str) -> float:
    """``value`` (``90s``, ``15m``, ``2h``, ``1d``, ``1h30m``) as seconds, up to 7 days (the
    bound every duration shares: ``MAX_SECONDS``); ``ValueError`` saying what is accepted
    otherwise."""
    match = _SPAN.fullmatch(value.strip())
    seconds = 0.0 if match is None else sum(
        int(count) * _SPAN_SECONDS[unit] for unit, count in match.groupdict().items() if count
    )  # fmt: skip
    if not 0 < seconds <= MAX_SECONDS:
        raise ValueError(f"{value[:40]!r}: not a duration up to 7d (like 90s, 15m, 2h, 1h30m, 1d)")
    return seconds
