"""What a span may carry is bounded whatever a phase reports: text cut at
``MAX_ATTRIBUTE_LENGTH`` characters, lists of actions at ``MAX_ACTIONS`` items with the rest
counted; and the sample ratio is a share, refused outside 0..1."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.service.tracing import (
    MAX_ACTIONS,
    MAX_ATTRIBUTE_LENGTH,
    bounded_actions,
    clipped,
)
from playguard_async.settings import SettingsError, load_settings


@given(st.text(max_size=MAX_ATTRIBUTE_LENGTH * 3))
def test_a_text_is_kept_whole_or_cut_with_a_mark(text: str) -> None:
    shown = clipped(text)
    assert len(shown) <= MAX_ATTRIBUTE_LENGTH
    if len(text) <= MAX_ATTRIBUTE_LENGTH:
        assert shown == text
    else:
        assert shown == text[: MAX_ATTRIBUTE_LENGTH - 1] + "…"


@given(st.lists(st.text(max_size=MAX_ATTRIBUTE_LENGTH * 2), max_size=MAX_ACTIONS * 4))
def test_actions_are_bounded_and_what_is_left_out_is_counted(actions: list[str]) -> None:
    shown = bounded_actions(actions)
    assert len(shown) == min(len(actions), MAX_ACTIONS)
    assert all(len(action) <= MAX_ATTRIBUTE_LENGTH for action in shown)
    if len(actions) <= MAX_ACTIONS:
        assert shown == [clipped(action) for action in actions]
    else:
        assert shown[:-1] == [clipped(action) for action in actions[: MAX_ACTIONS - 1]]
        assert shown[-1] == f"… {len(actions) - MAX_ACTIONS + 1} more"


@pytest.mark.parametrize(
    ("value", "taken"),
    [("0", 0.0), ("0.1", 0.1), ("1", 1.0), ("-0.1", None), ("1.5", None), ("nan", None)],
)
def test_the_sample_ratio_is_a_share(
    monkeypatch: pytest.MonkeyPatch, value: str, taken: float | None
) -> None:
    for name in list(os.environ):
        if name.startswith("PLAYGUARD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PLAYGUARD_TRACE_SAMPLE_RATIO", value)
    if taken is None:
        with pytest.raises(SettingsError, match="trace_sample_ratio"):
            load_settings()
    else:
        assert load_settings().trace_sample_ratio == taken
