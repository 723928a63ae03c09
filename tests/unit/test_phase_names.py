"""Phase names from settings: whatever is written there resolves to phases or fails as one
``UnknownPhase`` line naming the setting and the name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.phases.protocol import BUILTIN_PHASES, UnknownPhase, resolve_phases


@pytest.mark.parametrize(
    "name",
    [
        ".x:y",
        ":y",
        "x:",
        ":",
        "..:a",
        "a..b:c",
        "os:path:join",
        "tests.support.explodes_on_import:phase",
        "tests.support.absent_module:phase",
        "tests.support.phases:absent",
        "json:dumps",
        "playguard_async.phases.protocol:Phase",
        "builtins:__import__",
        "sync git",
        "[/x]",
        "\x1b[2J",
        "x" * 10_000 + ":y",
        "é:ü",
    ],
)
def test_a_bad_phase_name_is_one_line_naming_it(name: str) -> None:
    with pytest.raises(UnknownPhase) as error:
        resolve_phases(["sync_git", name])
    message = str(error.value)
    assert message.startswith("phases: ")
    assert "\n" not in message
    assert len(message) < 700


@given(st.text(max_size=40))
def test_any_phase_name_resolves_or_is_one_unknown_phase_line(name: str) -> None:
    try:
        said = [phase.name for phase in resolve_phases([name])]
    except UnknownPhase as error:
        said = str(error).splitlines()
    assert said == [name] if name in BUILTIN_PHASES else len(said) == 1


def test_every_builtin_phase_resolves_to_a_phase_of_its_registered_name() -> None:
    assert [phase.name for phase in resolve_phases(list(BUILTIN_PHASES))] == list(BUILTIN_PHASES)
