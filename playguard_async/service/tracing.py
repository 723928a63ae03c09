"""The cycles' traces, sent over OTLP/HTTP: one trace per sampled cycle, a span per phase and per
lease renewal, with the Marquee, fence, outcome and actions as attributes (never a setting, a URL
or a reason's free text: no secret reaches a span).

A share of the cycles is traced (``trace_sample_ratio``, by trace ID, parent-based so a cycle's
phases and renewals follow it): a cycle not sampled makes no span beyond its root's no-op and
carries no trace ID, so no log line or record points at a trace that was never sent. Attributes
are bounded: every text at ``MAX_ATTRIBUTE_LENGTH`` characters, a list of actions at
``MAX_ACTIONS`` items, a span at ``MAX_ATTRIBUTES`` attributes (the docs' operations/monitoring.md
gives the arithmetic behind the default ratio).

Imported only when ``otlp_endpoint`` is set (``service.wiring``): without it no OpenTelemetry
module is loaded and a cycle costs one no-op observer call. The tracer plugs into the engine as
its observer (wrapping the metrics', which it forwards to) and as a phase and a cycle listener;
the cycle's own spans are found through a context variable, since each cycle runs in its task.

Export never delays a cycle: finished spans go into a bounded queue that one thread drains
(``BoundedExport``); while the endpoint is down or slow the queue fills and further spans are
dropped and counted.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import structlog
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span

from playguard_async.coordination.lock import LossReason, ReleaseResult
from playguard_async.engine.observer import EngineObserver
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.settings import Settings
from playguard_async.settings.sections import otlp_header_pairs

log = structlog.get_logger("playguard.tracing")

EXPORT_BATCH = 512
"""Spans sent in one export request at most."""
EXPORT_DELAY = 1.0
"""Seconds the first span queued waits for others to fill a batch with: a quiet replica sends one
request a second at most, not one per span."""

MAX_ATTRIBUTE_LENGTH = 256
"""Characters a text attribute (an action, a name) keeps at most; a longer one is cut and ends in
``…``."""
MAX_ACTIONS = 32
"""Actions a span lists at most; beyond them one last item says how many more there were."""
MAX_ATTRIBUTES = 16
"""Attributes a span holds at most (the cycle span sets 9 at most): a backstop the SDK enforces."""

_NOT_FAILED = frozenset({Outcome.OK, Outcome.LOCKED, Outcome.PAUSED})
"""Outcomes whose cycle span is not marked as an error."""


class BoundedExport(SpanProcessor):
    """Hands finished spans to ``exporter`` from one thread of its own, through a queue of
    ``queue_size`` spans at most: ``on_end``, on the event loop, never waits; a span that finds
    the queue full is dropped and counted in ``dropped``, a batch the exporter refused in
    ``unexported``."""

    def __init__(self, exporter: SpanExporter, queue_size: int, *, stop_within: float) -> None:
        self._exporter = exporter
        self._queue_size = queue_size
        self._stop_within = stop_within
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._changed = threading.Condition()
        self._stopping = False
        self._exporting = False
        self.dropped = 0
        self.unexported = 0
        self._thread = threading.Thread(target=self._export_all, name="otlp-export", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        return len(self._queue)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        with self._changed:
            if self._stopping or len(self._queue) >= self._queue_size:
                self.dropped += 1
                return
            self._queue.append(span)
            if len(self._queue) in (1, EXPORT_BATCH):  # the worker waits for nothing else
                self._changed.notify_all()

    def shutdown(self) -> None:
        """Export what is queued within ``stop_within`` seconds, then stop: what is still queued
        then is dropped (an endpoint down or slow holds a stop up no longer)."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(self._stop_within)
        with self._changed:
            self.dropped += len(self._queue)
            self._queue.clear()
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait (blocking: from a thread) until the queue is empty and no export is out, or
        ``timeout_millis``; whether it is."""
        with self._changed:
            return self._changed.wait_for(
                lambda: not self._queue and not self._exporting, timeout_millis / 1000
            )

    def _export_all(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._queue) or self._stopping)
                self._changed.wait_for(
                    lambda: len(self._queue) >= EXPORT_BATCH or self._stopping, EXPORT_DELAY
                )
                if not self._queue:
                    return
                batch = [self._queue.popleft() for _ in range(min(EXPORT_BATCH, len(self._queue)))]
                self._exporting = True
            exported = self._exporter.export(batch)
            with self._changed:
                self._exporting = False
                if exported is not SpanExportResult.SUCCESS:
                    self.unexported += len(batch)
                self._changed.notify_all()


@dataclass(eq=False)
class _CycleSpans:
    """The spans of the cycle running in this context."""

    cycle: Span
    context: Context
    renewal: Span | None = None


_current: contextvars.ContextVar[_CycleSpans | None] = contextvars.ContextVar(
    "playguard_cycle_spans", default=None
)


class CycleTracer:
    """The engine's observer when traces are exported: forwards every call to ``inner`` (the
    metrics, or nobody) and makes the spans; ``phase_ended`` and ``cycle_finished`` are its phase
    and cycle listeners. ``close`` exports what is queued and stops."""

    def __init__(self, settings: Settings, inner: EngineObserver) -> None:
        self._inner = inner
        headers = settings.otlp_headers
        exporter = OTLPSpanExporter(
            endpoint=settings.otlp_endpoint,
            headers=otlp_header_pairs(headers.get_secret_value()) if headers else None,
            timeout=settings.otlp_timeout,
        )
        self.export = BoundedExport(
            exporter, settings.trace_queue_size, stop_within=settings.otlp_timeout
        )
        resource = Resource.create(
            {"service.name": "playguard", "service.instance.id": settings.replica_id}
        )
        # Limits given here, not read from OTEL_* variables; no events or links are made.
        limits = SpanLimits(
            max_span_attributes=MAX_ATTRIBUTES,
            max_span_attribute_length=MAX_ATTRIBUTE_LENGTH,
            max_events=0,
            max_links=0,
        )
        # Shut down by ``close``, not at exit as well (a second shutdown logs a warning).
        self._provider = TracerProvider(
            sampler=ParentBased(TraceIdRatioBased(settings.trace_sample_ratio)),
            resource=resource,
            span_limits=limits,
            shutdown_on_exit=False,
        )
        self._provider.add_span_processor(self.export)
        self._tracer = self._provider.get_tracer("playguard_async")

    async def close(self) -> None:
        """Export the queued spans within ``otlp_timeout``, off the loop."""
        await asyncio.to_thread(self._provider.shutdown)
        if self.export.dropped or self.export.unexported:
            log.warning(
                "trace.spans_lost", dropped=self.export.dropped, unexported=self.export.unexported
            )

    # -- EngineObserver ----------------------------------------------------------------------

    def tick_started(self, lag: float) -> None:
        self._inner.tick_started(lag)

    def fleet_shared(self, replicas: int, share: Collection[str]) -> None:
        self._inner.fleet_shared(replicas, share)

    def cycle_started(self, result: CycleResult) -> None:
        self._inner.cycle_started(result)
        span = self._tracer.start_span(
            "cycle",
            attributes={
                "playguard.marquee": clipped(result.marquee),
                "playguard.cycle": clipped(result.cycle_id),
                "playguard.replica": clipped(result.replica),
            },
        )
        if not span.is_recording():  # not sampled: nothing more to make, no ID to point at
            _current.set(None)
            return
        result.trace_id = trace.format_trace_id(span.get_span_context().trace_id)
        _current.set(_CycleSpans(span, trace.set_span_in_context(span)))

    def lease_renewing(self, headroom: float) -> None:
        self._inner.lease_renewing(headroom)
        if (spans := _current.get()) is not None:
            spans.renewal = self._tracer.start_span(
                "lease.renew",
                context=spans.context,
                attributes={"playguard.lease.headroom": round(headroom, 3)},
            )

    def lease_renewal_ended(self, outcome: str) -> None:
        self._inner.lease_renewal_ended(outcome)
        if (spans := _current.get()) is not None and spans.renewal is not None:
            spans.renewal.set_attribute("playguard.lease.renewal", outcome)
            if outcome == "lost":
                spans.renewal.set_status(trace.StatusCode.ERROR)
            spans.renewal.end()
            spans.renewal = None

    def lease_lost(self, reason: LossReason) -> None:
        self._inner.lease_lost(reason)
        if (spans := _current.get()) is not None:
            (spans.renewal or spans.cycle).set_attribute("playguard.lease.lost", reason)

    def lease_released(self, result: ReleaseResult) -> None:
        self._inner.lease_released(result)

    # -- listeners ---------------------------------------------------------------------------

    def phase_ended(self, result: CycleResult, phase: str) -> None:
        """The phase's span, drawn once it ended: its start is its end less its duration."""
        spans = _current.get()
        if spans is None:
            return
        ended = time.time_ns()
        took = int(result.durations.get(phase, 0.0) * 1e9)
        span = self._tracer.start_span(
            f"phase {phase}",
            context=spans.context,
            start_time=ended - took,
            attributes={
                "playguard.marquee": clipped(result.marquee),
                "playguard.phase": clipped(phase),
                "playguard.fence": result.fence or 0,
                "playguard.actions": bounded_actions(result.actions.get(phase, [])),
            },
        )
        if result.phase == phase and result.outcome not in _NOT_FAILED:
            span.set_attribute("playguard.outcome", result.outcome.value)
            span.set_status(trace.StatusCode.ERROR)
        span.end(end_time=ended)

    async def cycle_finished(self, result: CycleResult) -> None:
        spans = _current.get()
        if spans is None:
            return
        _current.set(None)
        cycle = spans.cycle
        cycle.set_attributes(
            {
                "playguard.outcome": result.outcome.value,
                "playguard.fence": result.fence or 0,
                "playguard.dry_run": result.dry_run,
                "playguard.actions": bounded_actions(_all_actions(result.actions.items())),
            }
        )
        if result.phase is not None:
            cycle.set_attribute("playguard.phase", clipped(result.phase))
        if result.outcome not in _NOT_FAILED:
            cycle.set_status(trace.StatusCode.ERROR)
        cycle.end()


def _all_actions(by_phase: Collection[tuple[str, Sequence[str]]]) -> list[str]:
    return [f"{phase}: {action}" for phase, actions in by_phase for action in actions]


def clipped(text: str) -> str:
    """``text`` within ``MAX_ATTRIBUTE_LENGTH`` characters: cut, ending in ``…``, if longer
    (here rather than by the SDK, which would log a warning for each)."""
    if len(text) <= MAX_ATTRIBUTE_LENGTH:
        return text
    return text[: MAX_ATTRIBUTE_LENGTH - 1] + "…"


def bounded_actions(actions: Sequence[str]) -> list[str]:
    """At most ``MAX_ACTIONS`` items, each ``clipped``: the first ``MAX_ACTIONS - 1`` actions and
    then ``… N more`` when there are more than ``MAX_ACTIONS``."""
    if len(actions) <= MAX_ACTIONS:
        return [clipped(action) for action in actions]
    kept = MAX_ACTIONS - 1
    return [*(clipped(action) for action in actions[:kept]), f"… {len(actions) - kept} more"]
