"""The web view's actions run by the CLI's own code (``web.actions.ActionDesk``): the
same functions ``playguard pause``, ``plan``, ``cycle``, ``pin``, ``rollout`` and ``unlock``
call, with the same checks of what was typed (``operator.action_input``), the web user's name
recorded as who. The daemon is given it by ``playguard run`` (the service layer does not reach
up into the CLI's modules).

A foreground cycle or plan builds its engine as the CLI does, and leaves the daemon's signal
handlers alone (``own_signals=False``): SIGTERM still stops the daemon.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from playguard_async.coordination import pins as pin_records
from playguard_async.coordination.pause import FLEET
from playguard_async.coordination.pause import REASON_MAX as PAUSE_REASON_MAX
from playguard_async.desired_state.model import InventoryError
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.kits.revision_shapes import is_commit
from playguard_async.kits.spans import span_seconds
from playguard_async.operator import display, pin, rollout
from playguard_async.operator.action_input import reason_problem
from playguard_async.operator.cycle import run_cycle
from playguard_async.operator.fleet import OperateError
from playguard_async.operator.pause import lift_scope_pause, take_scope_pause
from playguard_async.operator.plan import plan_one
from playguard_async.operator.rollout_hosts import act_on_hosts
from playguard_async.operator.unlock import unlock_lines, unlock_marquee
from playguard_async.settings import Settings, SettingsError
from playguard_async.web.actions import ActionRefused

_Action = Callable[[Mapping[str, str], str], Awaitable[list[str]]]


def _field(form: Mapping[str, str], name: str) -> str:
    value = form.get(name, "").strip()
    if not value:
        raise ActionRefused(f"no {name} given")
    return value


def _reason(form: Mapping[str, str], limit: int) -> str:
    reason = form.get("reason", "").strip()
    problem = reason_problem(reason, limit)
    if problem is not None:
        raise ActionRefused(f"reason {problem}")
    return reason


def _scope(form: Mapping[str, str]) -> str:
    """The Marquee named, or the whole fleet when the form says ``all``."""
    return FLEET if form.get("all") else _field(form, "marquee")


class CliDesk:
    """The actions of ``web.actions.ACTIONS``, each the CLI command's own functions with
    the daemon's settings; what cannot be done as asked is an ``ActionRefused`` saying why."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.actions: dict[str, _Action] = {
            "pause": self.pause,
            "resume": self.resume,
            "plan": self.plan,
            "cycle": self.cycle,
            "pin": self.pin,
            "unpin": self.unpin,
            "unlock": self.unlock,
        }
        for step in rollout.ACTIONS:
            self.actions[f"rollout-{step}"] = self._rollout(step)

    async def act(self, action: str, form: Mapping[str, str], user: str) -> list[str]:
        run = self.actions.get(action)
        if run is None:
            raise ActionRefused(f"no action {action[:40]!r}")
        try:
            return await run(form, user)
        except (OperateError, SettingsError, InventoryError, ValueError) as exc:
            # Shown to every operator of the page: where the desired state lives on this
            # machine is not theirs to read.
            unplaced = str(exc).replace(str(self.settings.inventory), "the desired state")
            raise ActionRefused(unplaced) from None

    async def pause(self, form: Mapping[str, str], user: str) -> list[str]:
        scope, reason = _scope(form), _reason(form, PAUSE_REASON_MAX)
        span = form.get("for", "").strip()
        seconds = span_seconds(span) if span else None
        taken = await take_scope_pause(self.settings, scope, reason, seconds, user=user)
        assert taken.pause is not None, "a pause taken is one"
        return [display.pause_text(taken.pause), *taken.host_lines()]

    async def resume(self, form: Mapping[str, str], user: str) -> list[str]:
        scope = _scope(form)
        lifted = await lift_scope_pause(self.settings, scope, user=user)
        what = "the fleet" if scope == FLEET else scope
        if lifted.pause is None:
            return [f"{what} is not paused; nothing to lift", *lifted.host_lines()]
        return [f"lifted by {user}: {display.pause_text(lifted.pause)}", *lifted.host_lines()]

    async def plan(self, form: Mapping[str, str], user: str) -> list[str]:
        run = await plan_one(self.settings, _field(form, "marquee"), own_signals=False)
        return [line for line, _ in display.plan_lines(run.result, run.holder)]

    async def cycle(self, form: Mapping[str, str], user: str) -> list[str]:
        def ignore(result: CycleResult, phase: str) -> None:
            """The page shows the cycle's end, not each phase."""

        marquee = _field(form, "marquee")
        run = await run_cycle(self.settings, marquee, ignore, own_signals=False)
        if run.result.outcome is Outcome.LOCKED:
            held = display.holder_text(run.holder) if run.holder else "another holder (gone since)"
            return [f"{marquee} is locked by {held}; no cycle ran"]
        return [display.cycle_summary(run.result, self.settings).plain]

    async def pin(self, form: Mapping[str, str], user: str) -> list[str]:
        marquee, playground = _field(form, "marquee"), _field(form, "playground")
        revision = form.get("revision", "").strip() or pin_records.LAST_GOOD
        if revision != pin_records.LAST_GOOD and not is_commit(revision):
            raise ActionRefused(f"revision {revision[:80]!r}: give last-good or a full commit")
        reason = _reason(form, pin_records.REASON_MAX)
        taken = await pin.pin(self.settings, marquee, playground, revision, reason, user=user)
        return [f"{marquee}/{playground}: {taken.describe()}"]

    async def unpin(self, form: Mapping[str, str], user: str) -> list[str]:
        marquee, playground = _field(form, "marquee"), _field(form, "playground")
        lifted = await pin.unpin(self.settings, marquee, playground, user=user)
        return [f"{marquee}/{playground}: " + ("unpinned" if lifted else "not pinned")]

    async def unlock(self, form: Mapping[str, str], user: str) -> list[str]:
        marquee = _field(form, "marquee")
        lines, _ = unlock_lines(
            marquee, await unlock_marquee(self.settings, marquee, force=True, user=user)
        )
        return lines

    def _rollout(self, step: str) -> _Action:
        async def act(form: Mapping[str, str], user: str) -> list[str]:
            scope, reason = _field(form, "scope"), _reason(form, rollout.REASON_MAX)
            meant = _field(form, "rollout")
            acted = await act_on_hosts(self.settings, scope, meant, step, reason, user=user)
            return [rollout.summary(acted.rollout), *acted.host_lines()]

        return act
