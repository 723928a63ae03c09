"""A new desired state settles: frozen out of the collections, and the heap its reading freed
given back to the system (glibc's malloc_trim, measured in this process's resident size)."""

from __future__ import annotations

import gc
import platform
from pathlib import Path

import pytest

from playguard_async import memory


def resident_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
@pytest.mark.parametrize("chunk", [600, 2_000, 16_000])
def test_freed_heap_between_live_chunks_goes_back_to_the_system(chunk: int) -> None:
    """Chunks bigger than pymalloc's 512 bytes come from malloc; one in 32 stays alive, as the
    desired state's objects stay among the reading's garbage, so free() alone cannot shrink
    the heap."""
    count = (64 << 20) // chunk
    chunks = [bytearray(chunk) for _ in range(count)]
    kept = chunks[::32]
    del chunks
    held = resident_mib()
    assert memory.return_freed_heap()
    given_back = held - resident_mib()
    assert given_back > 40, f"{given_back:.1f} MiB of the 62 MiB freed went back"
    assert len(kept) == -(-count // 32), "the live chunks stayed alive throughout"


def test_settling_freezes_what_is_alive_and_spaces_young_collections() -> None:
    threshold = gc.get_threshold()
    try:
        gc.set_threshold(700, *threshold[1:])
        state = {"marquees": [object() for _ in range(10)]}
        memory.settle_new_desired_state()
        assert gc.get_freeze_count() > 0
        assert not any(candidate is state for candidate in gc.get_objects())
        assert gc.get_threshold()[0] == memory.YOUNG_COLLECTION_THRESHOLD
        gc.set_threshold(20_000, *threshold[1:])
        memory.settle_new_desired_state()
        assert gc.get_threshold()[0] == 20_000, "a higher threshold set by the user stays"
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
