"""What a Marquee's own fence check says, shared by the remote layer (which meets it) and the
engine (which ends the cycle on it) without either importing the other.

Every lease carries a fence, a number Redis increments at each acquisition. A host accepts a write
only if its fence is at least the highest fence it has accepted before (see
``playguard_async.remote.guard``), so a holder whose lease lapsed while it was frozen cannot land a
write after a newer holder wrote: the host refuses it, whatever the stale process believes.
"""

from __future__ import annotations

from typing import Protocol


class FencedLease(Protocol):
    """What the remote layer needs of a lease: its fence, and how long it still holds."""

    @property
    def fence(self) -> int: ...

    @property
    def token(self) -> str:
        """Unique to the acquisition: two leases never share one, even with equal fences."""
        ...

    def remaining(self) -> float:
        """Seconds until the lease's deadline on the monotonic clock; negative once passed."""
        ...


class FenceRefused(Exception):
    """The host refused a write: its fence check did not pass.

    ``host_fence`` is the highest fence the host had accepted when it refused ours (None when it
    could not tell, for a missing or corrupt fence file or a state directory it cannot use);
    ``why`` is the host's own words.
    """

    def __init__(self, host: str, fence: int, host_fence: int | None, why: str) -> None:
        super().__init__(f"{host}: write with fence {fence} refused by the host: {why}")
        self.host = host
        self.fence = fence
        self.host_fence = host_fence
        self.why = why
