"""Checks the phase tests share: a password the registry refuses, and everything a failed phase
let out (its error chain, its findings, the log lines of the run), to look for that password in."""

from __future__ import annotations

import secrets
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from playguard_async.phases.protocol import PartialFailure


def write_wrong_password(password_file: Path) -> str:
    """Replace the registry password with one the registry refuses; returns it, to look for."""
    wrong = f"wrong-{secrets.token_urlsafe(12)}"
    password_file.write_text(wrong)
    return wrong


def everything_said(failure: PartialFailure, logs: Iterable[Mapping[str, Any]]) -> str:
    """The failure with its whole chain and traceback, its report, and every captured log event."""
    return "\n".join(
        [
            "".join(traceback.format_exception(failure)),
            repr(failure.report),
            *(repr(dict(event)) for event in logs),
        ]
    )
