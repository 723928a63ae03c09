"""One harness for the tests that drive the engine itself: an ``Engine`` over a desired state the
test holds, with scripted phases, fast settings, and every finished cycle kept in ``results``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.records import CycleRecords
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.desired_state.source import DesiredState
from playguard_async.engine.cycle import Cycle
from playguard_async.engine.observer import EngineObserver
from playguard_async.engine.results import CycleListener, CycleResult, PhaseListener
from playguard_async.engine.scheduler import Engine
from playguard_async.engine.services import CycleServices, SessionOpener
from playguard_async.phases.protocol import Phase, PhaseContext, PhaseReport
from playguard_async.settings import Settings, load_settings
from tests.support.daemon import within_lease
from tests.support.state import StaticState

Action = Callable[[PhaseContext], Awaitable[None]]


class ScriptedPhase:
    """A phase that runs ``action`` and remembers which Marquees it entered and left."""

    def __init__(self, name: str, action: Action | None = None) -> None:
        self.name = name
        self.action = action
        self.entered: list[str] = []
        self.finished: list[str] = []

    async def __call__(self, ctx: PhaseContext) -> PhaseReport:
        self.entered.append(ctx.marquee.name)
        if self.action is not None:
            await self.action(ctx)
        self.finished.append(ctx.marquee.name)
        return PhaseReport(actions=[f"{self.name} on {ctx.marquee.name}"])


def inventory_of(*names: str) -> Inventory:
    """Marquees the scripted phases can run on: nothing ever connects to them."""
    return Inventory(
        marquees=[
            Marquee(
                name=name,
                host="127.0.0.1",
                user="root",
                identity_file=Path("/nonexistent/id"),
                known_hosts=Path("/nonexistent/known_hosts"),
            )
            for name in names
        ]
    )


def settings_for(**overrides: Any) -> Settings:
    """Settings with short bounds, so a paused Redis or a hung phase ends a test quickly."""
    values: dict[str, Any] = {
        "replica_id": "test-replica",
        "lock_ttl": 30.0,
        "redis_socket_timeout": 0.5,
        "tick_interval": 60.0,
        "shutdown_grace": 5.0,
        "tick_jitter": 0.0,
    }
    values.update(overrides)
    return load_settings(None, **within_lease(values))


class EngineHarness:
    """An engine over ``state`` (by default Marquees ``m1`` .. ``m<marquees>``) with ``phases``.

    ``settings`` override ``settings_for``'s. Finished cycles land in ``results`` (then go to
    ``listeners``; each finished phase to ``phase_listeners``) and, when ``records`` is given,
    in Redis as the daemon records them; ``clock`` is the wall clock of maintenance windows.
    """

    def __init__(
        self,
        redis: RedisClient,
        *phases: Phase,
        state: DesiredState | None = None,
        marquees: int = 1,
        open_session: SessionOpener | None = None,
        observer: EngineObserver | None = None,
        records: CycleRecords | None = None,
        listeners: Sequence[CycleListener] = (),
        phase_listeners: Sequence[PhaseListener] = (),
        clock: Callable[[], float] = time.time,
        **settings: Any,
    ) -> None:
        self.results: list[CycleResult] = []
        self.records = records
        if state is None:
            state = StaticState(inventory_of(*(f"m{i}" for i in range(1, marquees + 1))))
        services = CycleServices.build(
            settings_for(**settings),
            redis,
            phases,
            open_session=open_session,
            listeners=[self._record, *listeners],
            phase_listeners=phase_listeners,
            observer=observer,
            records=records,
            clock=clock,
        )
        self.engine = Engine(services, state)

    async def _record(self, result: CycleResult) -> None:
        self.results.append(result)

    async def cycle(self, name: str | None = None) -> CycleResult:
        """One cycle of Marquee ``name`` (the inventory's first by default), as a tick runs it."""
        inventory = await self.engine.load_inventory()
        marquee = inventory.marquees[0] if name is None else inventory.marquee(name)
        return await Cycle(self.engine.services, marquee, inventory).run()

    async def tick(self) -> list[CycleResult]:
        """One tick of the engine, awaited to its end: each cycle's result."""
        return list(await asyncio.gather(*await self.engine.tick()))
