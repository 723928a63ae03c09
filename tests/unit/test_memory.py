"""A new desired state settles: frozen out of the collector's generations, young collections
spaced out, a higher threshold set by the user left alone."""

from __future__ import annotations

import gc

from playguard_async.kits import collector


def test_settling_freezes_what_is_alive_and_spaces_young_collections() -> None:
    threshold = gc.get_threshold()
    try:
        gc.set_threshold(700, *threshold[1:])
        state = {"marquees": [object() for _ in range(10)]}
        collector.settle_new_desired_state()
        assert gc.get_freeze_count() > 0
        assert not any(candidate is state for candidate in gc.get_objects())
        assert gc.get_threshold()[0] == collector.YOUNG_COLLECTION_THRESHOLD
        gc.set_threshold(20_000, *threshold[1:])
        collector.settle_new_desired_state()
        assert gc.get_threshold()[0] == 20_000, "a higher threshold set by the user stays"
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
