"""What a demo run did, per Marquee, from the cycles it recorded in Redis: how many cycles ended
in which outcome, and how the last one went. The demo prints it once the daemon has stopped,
so a newcomer sees what happened without reading the log.

``python -m playguard_lab.summary`` reads the settings that ``PLAYGUARD_CONFIG`` names,
as every ``playguard`` command does.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from playguard_async.coordination.marquee_reads import LastCycle
from playguard_async.desired_state.model import InventoryError
from playguard_async.kits.textclean import clean
from playguard_async.operator.describe import marquee_story
from playguard_async.operator.display import span
from playguard_async.operator.fleet import OperateError
from playguard_async.operator.status import fleet_status
from playguard_async.service.logs import configure_logging
from playguard_async.settings import Settings, SettingsError, load_settings


def outcome_label(cycle: LastCycle) -> str:
    """A dry run is told apart: it changed nothing, so its ``ok`` is not a converged Marquee."""
    return f"{cycle.outcome} (dry run)" if cycle.dry_run else cycle.outcome


def outcome_counts(cycles: Sequence[LastCycle]) -> str:
    """``3 ok, 1 unreachable``: the outcomes, most frequent first (ties in order of appearance)."""
    counted = collections.Counter(outcome_label(cycle) for cycle in cycles)
    return ", ".join(f"{count} {outcome}" for outcome, count in counted.most_common())


def last_result(cycle: LastCycle, now: float) -> str:
    """The last cycle in one phrase: outcome, why (when not ok), actions, duration, age."""
    why = ", ".join(filter(None, (cycle.phase, cycle.reason)))
    parts = [outcome_label(cycle) + (f" ({why})" if why else "")]
    done = f"{cycle.actions} action{'' if cycle.actions == 1 else 's'}"
    parts.append(done if cycle.duration is None else f"{done} in {span(cycle.duration)}")
    if cycle.finished_at is not None:
        parts.append(f"{span(max(0.0, now - cycle.finished_at))} ago")
    return ", ".join(parts)


def marquee_summary(name: str, history: Sequence[LastCycle], now: float) -> str:
    """One line for one Marquee; ``history`` newest first, as the records keep it."""
    if not history:
        return f"{name}: no cycle recorded"
    plural = "" if len(history) == 1 else "s"
    return (
        f"{name}: {len(history)} cycle{plural} ({outcome_counts(history)}); "
        f"last: {last_result(history[0], now)}"
    )


async def fleet_summary(settings: Settings) -> list[str]:
    """A line per Marquee of the inventory, in inventory order."""
    names = [status.name for status in await fleet_status(settings)]
    stories = [await marquee_story(settings, name, limit=settings.history_length) for name in names]
    now = time.time()
    return [marquee_summary(story.name, story.history, now) for story in stories]


def main() -> int:
    configure_logging("console", "critical")  # the lines printed say it all
    try:
        config = os.environ.get("PLAYGUARD_CONFIG")
        lines = asyncio.run(fleet_summary(load_settings(Path(config) if config else None)))
    except (SettingsError, InventoryError, OperateError) as exc:
        print(clean(f"Error: {exc}"), file=sys.stderr)
        return 1
    for line in lines:
        print(clean(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
