"""Cycles traced over OTLP/HTTP to a real receiver on loopback (an aiohttp server decoding each
``ExportTraceServiceRequest`` with ``opentelemetry-proto``): one trace per cycle, a span per phase
and per lease renewal with the Marquee, fence, outcome and actions, the trace ID in the cycle's
record and log lines, no secret anywhere in what is sent; an endpoint down or answering slowly
costs spans (dropped and counted), never a cycle's outcome."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import marquee_lock_key
from playguard_async.coordination.marquee_reads import MarqueeStatus
from playguard_async.coordination.records import CycleRecords
from playguard_async.cycle_record import trace_of
from playguard_async.engine.observer import Unobserved
from playguard_async.engine.results import Outcome
from playguard_async.operator.display import print_story
from playguard_async.phases.protocol import Phase, PhaseContext, PhaseReport
from playguard_async.service.story import steered_story
from playguard_async.service.tracing import MAX_ACTIONS, MAX_ATTRIBUTE_LENGTH, CycleTracer
from playguard_lab import free_port
from tests.support.engine import EngineHarness, ScriptedPhase, settings_for
from tests.support.web_view import picture_of, serving, view_of

pytestmark = pytest.mark.integration

HEADER_SECRET = "otlp-header-s3cr3t-0xC0FFEE"
REDIS_SECRET = "redis-pw-s3cr3t-0xBADF00D"


@dataclass
class Receiver:
    """What reached the receiver: each request's spans and headers. ``hold`` set: requests
    wait for it to be released (an endpoint answering slowly)."""

    url: str
    spans: list[Span] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    hold: asyncio.Event | None = None


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """An OTLP/HTTP traces endpoint on loopback."""
    port = free_port()
    found = Receiver(url=f"http://127.0.0.1:{port}/v1/traces")

    async def export(request: web.Request) -> web.Response:
        if found.hold is not None:
            await found.hold.wait()
        body = await request.read()
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        found.bodies.append(body)
        found.headers.append(dict(request.headers))
        for resource_spans in message.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                found.spans.extend(scope_spans.spans)
        answer = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", export)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield found
    finally:
        if found.hold is not None:
            found.hold.set()
        await runner.cleanup()


def traced(
    redis: Redis, endpoint: str, *phases: Phase, marquees: int = 1, **settings: Any
) -> tuple[EngineHarness, CycleTracer]:
    """An engine whose cycles are traced as ``build_engine`` wires it, recording its cycles;
    every cycle is traced unless ``trace_sample_ratio`` says otherwise."""
    settings = {"trace_sample_ratio": 1.0, **settings}
    settings |= {"otlp_endpoint": endpoint, "otlp_headers": f"x-api-key={HEADER_SECRET}"}
    tracer = CycleTracer(settings_for(**settings), Unobserved())
    records = CycleRecords(redis, history_length=5, timeout=1.0)
    harness = EngineHarness(
        redis, *phases, observer=tracer, records=records, listeners=[tracer.cycle_finished],
        phase_listeners=[tracer.phase_ended], marquees=marquees, **settings,
    )  # fmt: skip
    return harness, tracer


def attributes(span: Span) -> dict[str, Any]:
    return {item.key: plain(item.value) for item in span.attributes}


def plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(each) for each in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


async def test_a_cycle_is_one_trace_with_a_span_per_phase_and_renewal(
    redis: Redis, receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    harness, tracer = traced(redis, receiver.url, ScriptedPhase("first"), ScriptedPhase("second"),
                             redis_password=REDIS_SECRET)  # fmt: skip
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logged:
        result = await harness.cycle()
    await tracer.close()
    assert result.outcome is Outcome.OK
    assert result.trace_id is not None
    spans = receiver.spans
    assert {span.trace_id.hex() for span in spans} == {result.trace_id}
    by_name = {span.name: span for span in spans}
    assert sorted(by_name) == ["cycle", "lease.renew", "phase first", "phase second"]
    assert len(spans) == 5, "one renewal after each phase"
    cycle = by_name["cycle"]
    assert not cycle.parent_span_id
    for span in spans:
        if span is not cycle:
            assert span.parent_span_id == cycle.span_id
    cycle_attributes = attributes(cycle)
    assert cycle_attributes["playguard.marquee"] == "m1"
    assert cycle_attributes["playguard.outcome"] == "ok"
    assert cycle_attributes["playguard.fence"] == result.fence
    assert cycle_attributes["playguard.actions"] == [
        "first: first on m1",
        "second: second on m1",
    ]
    first = attributes(by_name["phase first"])
    assert first["playguard.actions"] == ["first on m1"]
    assert first["playguard.fence"] == result.fence
    renewals = [attributes(span) for span in spans if span.name == "lease.renew"]
    assert [each["playguard.lease.renewal"] for each in renewals] == ["renewed", "renewed"]
    # The trace ID in the record and on every line the cycle logged.
    assert harness.records is not None
    record = await harness.records.last("m1")
    assert record is not None
    assert trace_of(record) == result.trace_id
    await shown_in_describe_and_web_view(harness, capsys, result.trace_id)
    assert logged
    assert all(line.get("trace") == result.trace_id for line in logged), logged
    # The header went to the receiver; no secret went into a span.
    assert receiver.headers[0]["x-api-key"] == HEADER_SECRET
    sent = b"".join(receiver.bodies)
    for secret in (HEADER_SECRET, REDIS_SECRET):
        assert secret.encode() not in sent


async def shown_in_describe_and_web_view(
    harness: EngineHarness, capsys: pytest.CaptureFixture[str], trace_id: str
) -> None:
    """``describe``'s report and the web view's Marquee page of m1 both show ``trace_id``."""
    assert harness.records is not None
    inventory = await harness.engine.load_inventory()
    story = await steered_story(harness.records, inventory.marquee("m1"), (), limit=5)
    assert story.last is not None
    assert story.last.trace == trace_id
    capsys.readouterr()
    print_story(story, time.time())
    assert f"  trace: {trace_id}" in capsys.readouterr().out.splitlines()
    status = MarqueeStatus("m1", True, None, story.last)
    async with serving(view_of(picture_of([status], story))) as client:
        response = await client.get("/marquee/m1")
        page = await response.text()
    assert response.status == 200, page
    assert f'<td id="trace">{trace_id}</td>' in page


async def test_a_failed_phase_marks_its_span_and_the_cycle(
    redis: Redis, receiver: Receiver
) -> None:
    async def fail(ctx: PhaseContext) -> None:
        raise RuntimeError("broken")

    harness, tracer = traced(
        redis, receiver.url, ScriptedPhase("first", fail), ScriptedPhase("second")
    )
    result = await harness.cycle()
    await tracer.close()
    assert result.outcome is Outcome.PHASE_FAILED
    by_name = {span.name: span for span in receiver.spans}
    assert sorted(by_name) == ["cycle", "phase first"], "no renewal, no second phase"
    assert attributes(by_name["cycle"])["playguard.outcome"] == "phase_failed"
    assert attributes(by_name["phase first"])["playguard.outcome"] == "phase_failed"
    assert by_name["phase first"].status.code == by_name["cycle"].status.code != 0


async def test_an_endpoint_down_costs_spans_not_cycles(redis: Redis) -> None:
    down = f"http://127.0.0.1:{free_port()}/v1/traces"
    harness, tracer = traced(redis, down, ScriptedPhase("first"), marquees=3, trace_queue_size=4,
                             otlp_timeout=0.5)  # fmt: skip
    results = [await harness.cycle(f"m{number}") for number in (1, 2, 3)]
    assert [result.outcome for result in results] == [Outcome.OK] * 3
    assert tracer.export.queued <= 4
    await tracer.close()
    # Nine spans (three cycles, their phase and renewal), none delivered, each counted.
    assert tracer.export.dropped + tracer.export.unexported == 9


async def test_an_endpoint_answering_slowly_costs_spans_not_cycles(
    redis: Redis, receiver: Receiver
) -> None:
    receiver.hold = asyncio.Event()
    harness, tracer = traced(redis, receiver.url, ScriptedPhase("first"), marquees=4,
                             trace_queue_size=2, otlp_timeout=30.0)  # fmt: skip
    results = [await harness.cycle(f"m{number}") for number in (1, 2, 3, 4)]
    assert [result.outcome for result in results] == [Outcome.OK] * 4
    assert tracer.export.queued <= 2
    # Twelve spans: the first batch waits for the receiver (at most the two queued when the
    # export began), two more queued at most, the rest dropped.
    assert tracer.export.dropped >= 12 - 2 - 2
    receiver.hold.set()
    await tracer.close()
    assert len(receiver.spans) + tracer.export.dropped == 12
    assert tracer.export.unexported == 0


async def test_a_lost_renewal_is_a_failed_span_saying_why(redis: Redis, receiver: Receiver) -> None:
    async def steal(ctx: PhaseContext) -> None:
        await redis.set(marquee_lock_key("m1"), "intruder")

    harness, tracer = traced(redis, receiver.url, ScriptedPhase("first", steal),
                             ScriptedPhase("second"))  # fmt: skip
    result = await harness.cycle()
    await tracer.close()
    assert result.outcome is Outcome.LOCK_LOST
    by_name = {span.name: span for span in receiver.spans}
    assert sorted(by_name) == ["cycle", "lease.renew", "phase first"]
    renewal = by_name["lease.renew"]
    assert attributes(renewal)["playguard.lease.renewal"] == "lost"
    assert attributes(renewal)["playguard.lease.lost"] == "stolen"
    assert renewal.status.code == by_name["cycle"].status.code != 0
    assert attributes(by_name["cycle"])["playguard.outcome"] == "lock_lost"


async def test_only_sampled_cycles_are_traced_and_whole(redis: Redis, receiver: Receiver) -> None:
    harness, tracer = traced(redis, receiver.url, ScriptedPhase("first"), marquees=24,
                             trace_sample_ratio=0.5)  # fmt: skip
    results = [await harness.cycle(f"m{number}") for number in range(1, 25)]
    await tracer.close()
    assert [result.outcome for result in results] == [Outcome.OK] * 24
    sampled = {result.trace_id for result in results if result.trace_id is not None}
    assert 0 < len(sampled) < 24, "a ratio of 0.5 traces some cycles, not all (p < 1e-6)"
    # Each sampled cycle whole (cycle, phase, renewal), nothing of the others.
    by_trace: dict[str, list[str]] = {}
    for span in receiver.spans:
        by_trace.setdefault(span.trace_id.hex(), []).append(span.name)
    assert by_trace.keys() == sampled
    whole = ["cycle", "lease.renew", "phase first"]
    assert all(sorted(names) == whole for names in by_trace.values())
    # A cycle not traced points at no trace: not in its record, not on its log lines.
    assert harness.records is not None
    for result in results:
        record = await harness.records.last(result.marquee)
        assert record is not None
        assert trace_of(record) == result.trace_id


@pytest.mark.parametrize("ratio", [0.0, 1.0])
async def test_a_ratio_of_none_or_all_traces_none_or_all(
    redis: Redis, receiver: Receiver, ratio: float
) -> None:
    harness, tracer = traced(redis, receiver.url, ScriptedPhase("first"), marquees=3,
                             trace_sample_ratio=ratio)  # fmt: skip
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logged:
        results = [await harness.cycle(f"m{number}") for number in (1, 2, 3)]
    await tracer.close()
    assert [result.outcome for result in results] == [Outcome.OK] * 3
    assert len(receiver.spans) == 3 * 3 * ratio
    assert all((result.trace_id is not None) is bool(ratio) for result in results)
    assert all(("trace" in line) is bool(ratio) for line in logged), logged
    assert tracer.export.dropped == tracer.export.unexported == 0


class ManyActions:
    """A phase reporting ``count`` actions of ``length`` characters (a long compose diff)."""

    name = "many"

    def __init__(self, count: int, length: int) -> None:
        self.count, self.length = count, length

    async def __call__(self, ctx: PhaseContext) -> PhaseReport:
        return PhaseReport(actions=[f"{n:04d}".ljust(self.length, "x") for n in range(self.count)])


@pytest.mark.parametrize(
    ("count", "length"), [(1, 10_000), (MAX_ACTIONS, MAX_ATTRIBUTE_LENGTH), (500, 40), (300, 1_000)]
)
async def test_span_attributes_are_bounded_in_count_and_length(
    redis: Redis, receiver: Receiver, count: int, length: int
) -> None:
    harness, tracer = traced(redis, receiver.url, ManyActions(count, length))
    result = await harness.cycle()
    await tracer.close()
    assert result.outcome is Outcome.OK
    assert len(result.actions["many"]) == count, "the cycle's own record keeps every action"
    for span in receiver.spans:
        shown = attributes(span)
        assert len(shown) <= 16
        actions = shown.get("playguard.actions", [])
        assert len(actions) <= MAX_ACTIONS
        assert all(len(action) <= MAX_ATTRIBUTE_LENGTH for action in actions)
        if span.name != "lease.renew":
            assert len(actions) == min(count, MAX_ACTIONS)
            if count > MAX_ACTIONS:
                assert actions[-1] == f"… {count - MAX_ACTIONS + 1} more"
