"""Why a Marquee could not be reached, in words: shared by the remote layer (which meets it) and
the engine (which ends the cycle ``unreachable`` on it) without either importing the other.

A refused connection, a host key known_hosts does not hold, a refused key, a host that does not
answer, or a Marquee entry whose identity or known_hosts file cannot be used: none of these is a
failure of the phase that happened to open the connection, so the engine files the cycle under
its own outcome with the reason in words (``connection refused (127.0.0.1:22)``), never a repr.
"""

from __future__ import annotations


class Unreachable(Exception):
    """Mixed into the remote layer's errors that mean "the Marquee cannot be reached or used".

    ``reason`` is the outcome's words: what went wrong and where, e.g. ``connection refused
    (127.0.0.1:22)``, ``host key mismatch (127.0.0.1:22): ...``, ``identity_file /k: No such
    file or directory (marquee edge-1)``. Set by the subclass's constructor.
    """

    reason: str
