"""The built-in phases, one module each; ``playguard_async.phase.BUILTIN_PHASES`` names them, in
the order a cycle runs them, and is the one place a new built-in phase is added."""
