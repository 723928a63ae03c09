"""A desired-state source for tests: an inventory the test holds and can break on purpose."""

from __future__ import annotations

from playguard_async.desired_state.model import Inventory, InventoryError
from playguard_async.desired_state.source import Ability


class StaticState:
    abilities: frozenset[Ability] = frozenset()

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.error: InventoryError | None = None

    async def load(self) -> Inventory:
        if self.error is not None:
            raise self.error
        return self.inventory

    def describe(self) -> str:
        return "test inventory"
