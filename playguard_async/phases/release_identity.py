"""What names a release: a digest of what reaches a host when a Playground takes it, and of
nothing else, so every replica and every host of a scope names one release alike whatever
version of playguard it runs.

Replicas of two code versions (a rolling upgrade) must agree on the name, or each replaces the
other's rollout every tick and none gets past wave 1. A digest of the Playspec as the model
dumps it was not stable: a new model field at its default, the order of ``images``, a
``health_timeout`` changed the name though nothing on any host did. What reaches a host is:

- the commit its checkout is moved to;
- the Playspec's compose file (which file compose runs from that checkout);
- each image reference the Playspec pulls, with the digest its registry serves for it;
- the override file playguard writes (``remote.compose.override_content``). Its bytes differ by
  Marquee and Playground (their names are in its labels) and name the services the compose file
  at the commit has (the commit and compose file are above), and a release is the scope's, the
  same for its whole cohort: so its form is taken, rendered by the writer's own function with
  stand-in names. A version of playguard that writes another override (a new label recreates
  every container) names a new release, which then goes out in waves like any.

The ``.env`` is the checkout's (at the commit), never written by playguard from the desired
state; credentials, the rollout policy, ``rollback``, ``health_timeout`` and any description
change nothing a Playground runs, so they are not in the name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from playguard_async.desired_state.model import Playspec
from playguard_async.remote.compose import override_content

RELEASE_FORMAT = "release-v1"
"""The first line of what is digested: a change of what a release is made of takes a new tag,
deliberately (every scope's release is then named anew, once), never as a side effect."""

STAND_IN = "release"
"""The Marquee, Playground and service name the override's form is rendered with."""


def release_digest(playspec: Playspec, commit: str, digests: Mapping[str, str]) -> str:
    """The release of ``playspec`` at ``commit`` whose image references the registry resolves
    to ``digests`` (reference -> digest; every reference of the Playspec is in it)."""
    override = override_content(STAND_IN, STAND_IN, (STAND_IN,))
    document = {
        "commit": commit,
        "compose_file": playspec.compose_file,
        "images": {reference: digests[reference] for reference in sorted(set(playspec.images))},
        "override": hashlib.sha256(override.encode()).hexdigest(),
    }
    text = RELEASE_FORMAT + "\n" + json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
