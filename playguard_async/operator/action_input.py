"""What an operator types for an action, checked the same way on the command line and in the web
view (``operator.web_desk``): reasons (durations: ``kits.spans``)."""

from __future__ import annotations


def reason_problem(reason: str, limit: int) -> str | None:
    """What is wrong with ``reason`` (None: nothing), after its name: 1 to ``limit`` printable
    characters."""
    if not reason.strip() or len(reason) > limit or not reason.isprintable():
        return f"of {len(reason)} characters: give 1 to {limit} printable ones"
    return None
