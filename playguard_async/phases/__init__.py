"""The built-in phases, one module each, and the protocol they keep (``protocol``), which is all
the engine knows of them. ``protocol.BUILTIN_PHASES`` names them in the order a cycle runs them,
and is the one place a new built-in phase is added."""
