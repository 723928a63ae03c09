"""The built-in phases, by the names settings use for them."""

from __future__ import annotations

from playguard_async.phase import Phase

BUILTIN_PHASES: dict[str, Phase] = {}
