"""A bounded memo of what compose answered, kept by the replica across cycles.

``config --services`` and ``config --hash`` cost the host a Python program's start each (compose
1.29; bench/README.md); on a converged Marquee their answers never change. The memo keeps, per
compose project of a Marquee, the last answers with the digest of everything they were computed
from (``remote.host_state`` builds it); an answer is used only when that digest is equal again, so
a changed file, override, image or container makes compose be asked again. The least recently
used project is forgotten past ``size`` entries; ``size`` 0 remembers nothing.
"""

from __future__ import annotations

from collections import OrderedDict
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
