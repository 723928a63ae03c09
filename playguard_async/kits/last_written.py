"""What a replica last wrote under each name, so that a value equal to it is not written again."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class LastWritten:
    """Name -> the digest last written under it and when (``clock``'s time): a value of the
    same digest is due again only once ``refresh_after`` seconds have passed, so a copy that
    expires or that its store forgot is put back before long. Bounded by the names written
    (a Marquee each: the fleet's size)."""

    refresh_after: float
    clock: Callable[[], float] = time.monotonic
    _written: dict[str, tuple[str, float]] = field(default_factory=dict)

    def due(self, name: str, digest: str) -> bool:
        kept = self._written.get(name)
        return kept is None or kept[0] != digest or self.clock() >= kept[1] + self.refresh_after

    def wrote(self, name: str, digest: str) -> None:
        self._written[name] = (digest, self.clock())

    def forget(self, name: str) -> None:
        """After a write that may not have happened: the next one is due whatever it holds."""
        self._written.pop(name, None)
