"""How a replica holds a big desired state cheaply from one change to the next.

At 10,000 Marquees the desired state is hundreds of thousands of objects that live until the next
change. ``settle_new_desired_state`` runs once per change, when the new state is in place:

- What is alive then (the state, its index, the engine) leaves the collector's generations
  (``gc.freeze``): every full collection walked all of it again (bench/README.md: GC per tick).
  The previous state's objects go back first, so the collector frees them once they are garbage.
- The collector runs young collections every ``YOUNG_COLLECTION_THRESHOLD`` allocations.

Not done: handing the heap the reading freed back to the system (glibc's ``malloc_trim``): the
next tick's cycles take that memory again, and the resident size after a tick was the same with
it and without (bench/README.md).
"""

from __future__ import annotations

import gc

YOUNG_COLLECTION_THRESHOLD = 5000
"""Allocations between two young collections (Python's default is 700). A tick's cycles each hold
a few dozen objects (task, coroutines, futures, result) for the cycle's length: at 700 they were
promoted while still alive and six full collections a tick walked every cycle in flight (0.5-0.6 s
of a 10,000-Marquee tick); at 5,000 most die young and no full collection runs (0.06-0.1 s)."""


def settle_new_desired_state() -> None:
    """Keep what is alive now out of the collections (see the module's doc)."""
    gc.unfreeze()
    gc.freeze()
    young, *older = gc.get_threshold()
    if young < YOUNG_COLLECTION_THRESHOLD:
        gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *older)
