"""Every desired-state source the registry knows declares exactly the optional abilities it
implements: readers trust the declaration (``as_remote``, ``as_narrow``), so a misspelt or missing
method must fail here, not silently lose wake-ups or the observed state's write-back."""

from __future__ import annotations

from pathlib import Path

import pytest
from typing_extensions import get_protocol_members

from playguard_async.desired_state.registry import SOURCE_KINDS, source_kind
from playguard_async.desired_state.source import (
    Ability,
    DesiredState,
    NarrowDesiredState,
    RemoteDesiredState,
)
from playguard_async.service.connections import inventory_source
from playguard_async.settings import load_settings

ABILITY_PROTOCOLS: dict[Ability, type] = {
    Ability.REMOTE: RemoteDesiredState,
    Ability.NARROW: NarrowDesiredState,
}


def members_of(ability: Ability) -> frozenset[str]:
    """What a source needs beyond ``DesiredState`` to have ``ability``."""
    return get_protocol_members(ABILITY_PROTOCOLS[ability]) - get_protocol_members(DesiredState)


def test_every_ability_names_a_protocol_with_members_of_its_own() -> None:
    assert set(ABILITY_PROTOCOLS) == set(Ability)
    assert all(members_of(ability) for ability in Ability)


SETTING_OF = {"yaml": "yaml", "postgresql": "postgresql://playguard@db.example:5432/fleet"}
"""A ``desired_state`` value naming each kind of source the registry knows."""


def test_every_registered_kind_of_source_is_tried_here() -> None:
    assert set(SETTING_OF) == {kind.name for kind in SOURCE_KINDS}
    assert all(source_kind(value).name == name for name, value in SETTING_OF.items())


@pytest.mark.parametrize("kind", sorted(SETTING_OF))
def test_a_source_declares_exactly_the_abilities_it_implements(kind: str, tmp_path: Path) -> None:
    settings = load_settings(
        None,
        desired_state=SETTING_OF[kind],
        desired_state_password="not-used",
        inventory=tmp_path / "inventory.yaml",
    )
    source = inventory_source(settings)
    implemented = {
        ability
        for ability in Ability
        if all(hasattr(source, member) for member in members_of(ability))
    }
    assert source.abilities == implemented, type(source).__name__
