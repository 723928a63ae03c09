"""The phase boundary is typed: a phase's use of its session is checked against the real session,
so mypy --strict refuses a call the session does not have, in a phase's body."""

from __future__ import annotations

from pathlib import Path

from mypy import api

PHASE = """
from playguard_async.phases.protocol import PhaseReport
from playguard_async.phases.toolkit import CycleContext


class Typo:
    name = "typo"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        session = await ctx.remote()
        await session.run(["true"])
        session.no_such_method()
        return PhaseReport()
"""


def test_mypy_refuses_a_session_method_that_does_not_exist(tmp_path: Path) -> None:
    module = tmp_path / "typo_phase.py"
    module.write_text(PHASE, encoding="utf-8")
    out, _, status = api.run(
        ["--strict", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(module)]
    )
    assert status == 1, out
    assert out.splitlines() == [
        f'{module}:12: error: "RemoteSession" has no attribute "no_such_method"  [attr-defined]'
    ]
