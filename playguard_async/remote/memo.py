"""A bounded memo of what compose answered, kept by the replica across cycles.

``config --services`` and ``config --hash`` cost the host a Python program's start each (compose
1.29; bench/README.md); on a converged Marquee their answers never change. The memo keeps, per
compose project of a Marquee, the last answers with the digest of everything they were computed
from (``remote.host_state`` builds it); an answer is used only when that digest is equal again, so
a changed file, override, image or container makes compose be asked again. The least recently
used project is forgotten past ``size`` entries; ``size`` 0 remembers nothing.

The same answers are also kept on the host, in the Marquee's fenced state directory
(``remote.host_state``), so that a fresh process (a restarted daemon, a replica taking over a
Marquee, an operator's ``cycle`` or ``plan``) need not ask compose again either. That file is host
output like any other: ``parse_kept`` takes only entries of the written form and drops the rest.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ComposeAnswer:
    """What compose said (``config --services``, ``config --hash``) for inputs of digest
    ``inputs``."""

    inputs: str
    services: tuple[str, ...]
    hashes: tuple[tuple[str, str], ...]


ProjectKey = tuple[str, str]
"""(Marquee name, compose project name)."""


class ComposeMemo:
    """``ProjectKey`` -> the last ``ComposeAnswer``; bounded, least recently used first out."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._answers: OrderedDict[ProjectKey, ComposeAnswer] = OrderedDict()

    def get(self, project: ProjectKey, inputs: str) -> ComposeAnswer | None:
        """The answer remembered for ``project`` if it was computed from ``inputs``."""
        answer = self._answers.get(project)
        if answer is None or answer.inputs != inputs:
            return None
        self._answers.move_to_end(project)
        return answer

    def put(self, project: ProjectKey, answer: ComposeAnswer) -> None:
        if not self.size:
            return
        self._answers[project] = answer
        self._answers.move_to_end(project)
        while len(self._answers) > self.size:
            self._answers.popitem(last=False)

    def __len__(self) -> int:
        return len(self._answers)


KEPT_VERSION = 1
KEPT_LIMIT = 256 * 1024
"""Characters of a kept file read at most; a longer one (not ours) is no record."""

_DIGEST = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,255}")
"""A service name or config hash as compose prints them: one line, no control characters."""


def encode_kept(answers: Mapping[str, ComposeAnswer]) -> str:
    """Compose project name -> its answer, as the one line the host keeps."""
    return json.dumps(
        {
            "version": KEPT_VERSION,
            "projects": {
                project: {
                    "inputs": answer.inputs,
                    "services": list(answer.services),
                    "hashes": dict(answer.hashes),
                }
                for project, answer in sorted(answers.items())
            },
        },
        separators=(",", ":"),
    )


def parse_kept(line: str) -> dict[str, ComposeAnswer]:
    """The answers a kept line holds, by compose project name; an entry not of the written form
    is left out, and a line that is not one of ours holds none. Never raises."""
    if len(line) > KEPT_LIMIT:
        return {}
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(document, dict) or document.get("version") != KEPT_VERSION:
        return {}
    projects = document.get("projects")
    if not isinstance(projects, dict):
        return {}
    kept: dict[str, ComposeAnswer] = {}
    for project, entry in projects.items():
        answer = _answer(entry)
        if answer is not None:
            kept[project] = answer
    return kept


def _answer(entry: object) -> ComposeAnswer | None:
    if not isinstance(entry, dict):
        return None
    inputs, services, hashes = entry.get("inputs"), entry.get("services"), entry.get("hashes")
    if (
        not isinstance(inputs, str)
        or not _DIGEST.fullmatch(inputs)
        or not isinstance(services, list)
        or not all(isinstance(name, str) and _NAME.fullmatch(name) for name in services)
        or not isinstance(hashes, dict)
        or not all(
            isinstance(value, str) and _NAME.fullmatch(name) and _NAME.fullmatch(value)
            for name, value in hashes.items()
        )
    ):
        return None
    return ComposeAnswer(inputs, tuple(services), tuple(sorted(hashes.items())))
