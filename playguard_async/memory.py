"""How a replica holds a big desired state cheaply from one change to the next.

At 10,000 Marquees the desired state is hundreds of thousands of objects that live until the next
change, and reading it (YAML or rows, then validation) leaves as much again behind in freed
memory. ``settle_new_desired_state`` runs once per change, when the new state is in place:

- What is alive then (the state, its index, the engine) leaves the collector's generations
  (``gc.freeze``): every full collection walked all of it again, 16 % of a 10,000-Marquee tick.
  The previous state's objects go back first, so the collector frees them once they are garbage.
- The collector runs young collections every ``YOUNG_COLLECTION_THRESHOLD`` allocations.
- The C heap the reading freed goes back to the system (glibc's ``malloc_trim``): freed between
  chunks that stay, it counted in the resident size until the next change (33 of the 102 MiB that
  reading 10,000 Marquees x 5 Playgrounds added; the call took 5 ms). Where the C library has no
  such call (musl, macOS) this step does nothing.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable

YOUNG_COLLECTION_THRESHOLD = 5000
"""Allocations between two young collections (Python's default is 700). A tick's cycles each hold
a few dozen objects (task, coroutines, futures, result) for the cycle's length: at 700 they were
promoted while still alive and six full collections a tick walked every cycle in flight (0.5-0.6 s
of a 10,000-Marquee tick); at 5,000 most die young and no full collection runs (0.06-0.1 s)."""


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_MALLOC_TRIM = _find_malloc_trim()


def settle_new_desired_state() -> None:
    """Keep what is alive now out of the collections, and give the freed heap back (see the
    module's doc)."""
    gc.unfreeze()
    gc.freeze()
    young, *older = gc.get_threshold()
    if young < YOUNG_COLLECTION_THRESHOLD:
        gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *older)
    return_freed_heap()


def return_freed_heap() -> bool:
    """Give the C heap's free pages back to the system; False where there is no way to."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
