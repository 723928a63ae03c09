"""A cycle's ending: the lease released, the cycle recorded and the resume bookkeeping written in
one round trip (``CycleEnd``), then the finished cycle logged and told to the listeners.

Apart from the cycle's lease (``engine.cycle_lease``) and phase walk (``engine.phase_walk``)
because it runs on every way out, cancellation included, and owes its caller nothing but to
happen once: what can fail in it is logged, never raised.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

import structlog

from playguard_async.coordination.cycle_end import Ending, Resume
from playguard_async.coordination.lock import Lease
from playguard_async.coordination.records import CycleRecords
from playguard_async.engine.results import CycleResult, Outcome, one_line
from playguard_async.engine.services import CycleServices
from playguard_async.kits.aio import detached

log = structlog.get_logger("playguard.engine")


async def end_cycle(services: CycleServices, result: CycleResult, lease: Lease | None) -> None:
    """Release, record and resume bookkeeping in one round trip (``CycleEnd``), which runs to
    its end even if the cycle is cancelled again meanwhile (then it is told when it is in,
    and the cancellation propagates at once); then ``_finish``."""
    result.duration = round(time.monotonic() - result.started, 4)
    result.finished_at = time.time()
    resume = None
    if lease is not None:
        interrupted = result.outcome is Outcome.INTERRUPTED
        resume = Resume.RECORD if interrupted else Resume.CLEAR
    # A cycle left alone (locked, paused at its start) did nothing there; nothing to record.
    record = None if result.left_alone else result.to_record()
    ending = services.ending.write(result.marquee, lease=lease, record=record, resume=resume)
    try:
        _tell_ending(services, await asyncio.shield(ending), resume)
    except asyncio.CancelledError:
        ending.add_done_callback(functools.partial(_tell_ending_late, services, resume))
        raise
    except Exception as exc:  # the observer's bug, told of the release
        result.outcome, result.reason = Outcome.ERROR, one_line(exc)
        log.exception("cycle.error")
        if services.records is not None:
            await _record_again(services.records, result)
    await _finish(services, result)


def _tell_ending(services: CycleServices, ending: Ending, resume: Resume | None) -> None:
    # Expected while Redis is slow or away: one line each, none past debug level while an
    # outage is already told.
    if ending.record_error is not None:
        log.log(_unless_redis_down(services, logging.ERROR), "cycle.record_failed",
                error=one_line(ending.record_error))  # fmt: skip
    if ending.resume_error is not None:
        log.log(_unless_redis_down(services, logging.WARNING), "resume.write_failed",
                error=one_line(ending.resume_error))  # fmt: skip
    elif resume is Resume.RECORD:
        log.info("resume.recorded")
    if ending.released is not None:
        services.observer.lease_released(ending.released)


def _tell_ending_late(
    services: CycleServices, resume: Resume | None, ending: asyncio.Future[Ending]
) -> None:
    """``_tell_ending`` for a cycle cancelled while its ending was out; nobody is left to
    hear a failure but the log."""
    try:
        _tell_ending(services, ending.result(), resume)
    except Exception:
        log.exception("cycle.error")


async def _record_again(records: CycleRecords, result: CycleResult) -> None:
    """Record a cycle whose outcome changed after its ending went out (an observer's bug)."""
    try:
        await detached(records.record(result.marquee, result.to_record()))
    except Exception as exc:
        log.error("cycle.record_failed", error=one_line(exc))


async def _finish(services: CycleServices, result: CycleResult) -> None:
    log.log(
        result.log_level,
        "cycle.finished",
        outcome=result.outcome.value,
        reason=result.reason,
        failed_phase=result.phase,
        fence=result.fence,
        actions=sum(len(taken) for taken in result.actions.values()),
        durations=result.durations,
        duration=result.duration,
        waited=result.waited,
        dry_run=result.dry_run,
    )
    for listener in services.listeners:
        try:
            await detached(listener(result))
        except Exception as exc:
            # Expected while Redis is slow or away: one line, no traceback to drown it, and
            # none at all past debug level while an outage is already told.
            log.log(_unless_redis_down(services, logging.ERROR), "cycle.listener_failed",
                    error=one_line(exc))  # fmt: skip


def _unless_redis_down(services: CycleServices, level: int) -> int:
    """``level`` for a line about a failed Redis call; debug while an outage is told."""
    return logging.DEBUG if services.redis_outage.down else level
