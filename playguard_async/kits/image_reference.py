"""Image references as Docker reads them, so that two spellings of one image compare equal.

``busybox``, ``busybox:latest``, ``library/busybox``, ``docker.io/library/busybox:latest`` and
``index.docker.io/library/busybox`` name one image to Docker; compared as text they are four.
``normalized`` spells a reference the one way, by docker/distribution's reference grammar
(``reference.ParseNormalizedNamed`` and ``TagNameOnly``):

- a first component with a ``.`` or a ``:`` (``host:port``: that colon is a port, not a tag), or
  ``localhost``, or an upper-case letter, names the registry; anything else is on Docker Hub,
  ``docker.io``, which ``index.docker.io`` and ``registry-1.docker.io`` also name (the first is
  distribution's legacy name for it, the second the address Docker Hub is served from);
- a single-component name on Docker Hub is an official image: ``library/`` is implied;
- without a digest, ``:latest`` is implied; with one (``name@sha256:...`` or
  ``name:tag@sha256:...``) the digest alone says which image, as for ``docker pull``, which
  ignores the tag beside it, so the tag is dropped;
- the repository path is lower case only (a path with an upper-case letter is no reference);
  the registry host may be written in any case and is compared in lower case, as DNS names are
  (but for one that names a registry only by its upper case, which lower case would make a path);
- an image ID (``sha256:`` and 64 hex digits, or the 64 digits alone) names exactly one image
  and is spelt ``sha256:<hex>``.

Anything else (empty, spaces, control characters, a name over distribution's 255 characters,
``:::``) is no reference: ``normalized`` gives None and ``same_image`` False, never an error, so
a caller leaves what it names unjudged. Pure and cheap: no I/O, one regular expression.
"""

from __future__ import annotations

import re

DOCKER_HUB = "docker.io"
"""Docker Hub's canonical registry name."""

_HUB_ALIASES = frozenset({DOCKER_HUB, "index.docker.io", "registry-1.docker.io"})
_NAME_MAX = 255
"""distribution's ``NameTotalLengthMax``: the registry and path together."""
_TEXT_MAX = _NAME_MAX + 1 + 128 + 1 + 200
"""Longer text is no reference whatever it holds: judged without running the expression."""

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = (
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?"
)
_REFERENCE = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>\w[\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?",
    re.ASCII,
)
_IMAGE_ID = re.compile(r"(?:sha256:)?(?P<hex>[0-9a-f]{64})", re.ASCII)


def normalized(reference: str) -> str | None:
    """``reference`` spelt the one way Docker reads it (see the module), or None when it is no
    image reference. ``normalized(normalized(r)) == normalized(r)`` for every reference."""
    if not isinstance(reference, str) or len(reference) > _TEXT_MAX:
        return None
    image_id = _IMAGE_ID.fullmatch(reference)
    if image_id is not None:
        return f"sha256:{image_id['hex']}"
    match = _REFERENCE.fullmatch(reference)
    if match is None:
        return None
    domain, path = _split_domain(match["domain"], match["path"])
    if len(domain) + 1 + len(path) > _NAME_MAX:
        return None
    if match["digest"] is not None:
        return f"{domain}/{path}@{match['digest']}"
    return f"{domain}/{path}:{match['tag'] or 'latest'}"


def _split_domain(first: str | None, path: str) -> tuple[str, str]:
    """The registry and the repository path of a name the expression split as ``first/path``
    (``first`` None for a name without a slash): distribution's ``splitDockerDomain``. A host
    is compared in lower case where it still names a registry so (``Registry.Example``); one
    that names a registry only by its upper case (``Team``) keeps it, or it would not."""
    if first is not None and not _names_a_registry(first):
        path, first = f"{first}/{path}", None
    if first is None:
        domain = DOCKER_HUB
    else:
        lowered = first.lower()
        domain = lowered if _names_a_registry(lowered) else first
    if domain in _HUB_ALIASES:
        domain = DOCKER_HUB
        if "/" not in path:
            path = f"library/{path}"
    return domain, path


def _names_a_registry(first: str) -> bool:
    """Docker's rule for the first component of a name: a registry when it has a ``.`` or a
    ``:``, is ``localhost``, or has an upper-case letter (which no path component may have)."""
    return "." in first or ":" in first or first == "localhost" or first.lower() != first


def registry_of(reference: str) -> str | None:
    """The registry ``reference`` names as it is written (``host[:port]``), or None for a
    Docker Hub name written without one (``busybox``, ``library/busybox``, ``team/app``)."""
    first, slash, _ = reference.partition("/")
    if slash and _names_a_registry(first):
        return first
    return None


def same_image(one: str, other: str) -> bool:
    """Whether two references name one image to Docker; False when either is no reference."""
    mine = normalized(one)
    return mine is not None and mine == normalized(other)
