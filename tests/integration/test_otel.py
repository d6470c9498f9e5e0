"""OpenTelemetry: one trace from the request that triggers a run through every attempt,
on the same host or after an SQS hop into a Lambda handler (SDK in-memory exporter)."""

from __future__ import annotations

import asyncio
import contextvars
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from runlane import (
    Attempt,
    Context,
    ManualClock,
    Observer,
    RetryPolicy,
    Run,
    Runlane,
    RunlaneError,
    RunStatus,
    WorkerMode,
    queue,
    sqlite_lane,
    task,
)
from runlane.logs import JsonFormatter, TraceContextFilter
from runlane.otel import otel_tracing
from runlane.sqs import create_sqs_lambda_handler, sqs_queue, sqs_transport
from runlane.transport.sqs.lambda_handler import lambda_event_loop

pytest_plugins = ["tests.support.ministack"]

MAIN = queue("main", default=True)
PROVIDER = TracerProvider()
EXPORTER = InMemorySpanExporter()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
TRACER = PROVIDER.get_tracer("tests")
PROPAGATOR = TraceContextTextMapPropagator()
#: Formats the records task code logs, as an app's JSON handler would.
LOG_LINES = io.StringIO()
task_logger = logging.getLogger("tests.otel.task")


@task("otel.flaky", retry=RetryPolicy(max_attempts=3, initial_delay="1s", max_delay="1s"))
async def flaky(payload: Any, ctx: Context) -> int:
    with TRACER.start_as_current_span("inside the task"):
        task_logger.info("attempt %s", ctx.attempt)
    if ctx.attempt < 3:
        raise RuntimeError(f"attempt {ctx.attempt} fails")
    return ctx.attempt


@task("otel.sync")
def sync_task(payload: Any, ctx: Context) -> None:
    # Spans of sync tasks nest too: they run in a copy of the attempt's context.
    with TRACER.start_as_current_span("inside the sync task"):
        pass


@pytest.fixture(autouse=True)
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    handler = logging.StreamHandler(LOG_LINES)
    handler.setFormatter(JsonFormatter())
    task_logger.addHandler(handler)
    task_logger.setLevel(logging.INFO)
    LOG_LINES.seek(0)
    LOG_LINES.truncate()
    yield EXPORTER
    task_logger.removeHandler(handler)


def runtime(path: Path, **options: Any) -> Runlane:
    return Runlane(
        lane=sqlite_lane(path, **options.pop("lane_options", {})),
        queues=[MAIN],
        tasks=[flaky, sync_task],
        observers=[otel_tracing(PROVIDER, PROPAGATOR)],
        environment="otel-test",
        **options,
    )


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


async def test_one_trace_runs_from_the_request_through_the_trigger_and_every_retry(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    async with runtime(tmp_path / "o.db", clock=clock) as rl:
        await rl.migrate()
        with TRACER.start_as_current_span("POST /orders"):
            run = await rl.trigger(flaky, None)
        for _ in range(3):
            settled = await rl.execute_next()
            assert settled is not None
            clock.advance("1s")
        assert settled.status is RunStatus.SUCCEEDED

    finished = EXPORTER.get_finished_spans()
    (request,) = named(finished, "POST /orders")
    (producer,) = named(finished, "trigger otel.flaky")
    consumers = named(finished, "execute otel.flaky")
    assert len(consumers) == 3
    trace_id = request.context.trace_id
    assert {span.context.trace_id for span in finished} == {trace_id}

    assert producer.kind is SpanKind.PRODUCER and producer.parent == request.context
    assert producer.attributes is not None
    assert dict(producer.attributes) == {
        "messaging.system": "runlane",
        "messaging.destination.name": "main",
        "messaging.operation.name": "trigger",
        "messaging.operation.type": "send",
        "messaging.message.id": run.id,
        "runlane.task_id": "otel.flaky",
        "runlane.environment": "otel-test",
    }
    # The stored carrier is the producer's context.
    assert run.trace_carrier is not None
    assert f"{trace_id:032x}-{producer.context.span_id:016x}" in run.trace_carrier["traceparent"]

    for number, consumer in enumerate(consumers, start=1):
        assert consumer.kind is SpanKind.CONSUMER
        # Every attempt is a child of the creation context, and links to it.
        assert consumer.parent is not None
        assert consumer.parent.span_id == producer.context.span_id
        assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]
        attributes = consumer.attributes
        assert attributes is not None
        assert attributes["messaging.operation.name"] == "execute"
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["messaging.message.id"] == run.id
        assert attributes["messaging.destination.name"] == "main"
        assert attributes["runlane.attempt"] == number
        assert attributes["runlane.worker_id"] == rl.worker_id
    first, second, third = consumers
    for failed in (first, second):
        assert failed.attributes is not None
        assert failed.attributes["runlane.outcome"] == "retried"
        assert failed.attributes["error.type"] == "RuntimeError"
        assert failed.status.status_code is StatusCode.ERROR
        assert [event.name for event in failed.events] == ["exception"]
    assert third.attributes is not None and third.attributes["runlane.outcome"] == "succeeded"
    assert third.status.status_code is StatusCode.UNSET and "error.type" not in third.attributes

    # Spans the task makes nest under its attempt; its log lines carry the ids.
    inside = named(finished, "inside the task")
    assert [span.parent.span_id for span in inside if span.parent] == [
        consumer.context.span_id for consumer in consumers
    ]
    lines = [json.loads(line) for line in LOG_LINES.getvalue().splitlines()]
    assert [line["span_id"] for line in lines] == [f"{s.context.span_id:016x}" for s in inside]
    assert {line["trace_id"] for line in lines} == {f"{trace_id:032x}"}


async def test_a_callers_carrier_is_kept_and_trigger_many_uses_one_producer_span(
    tmp_path: Path,
) -> None:
    given = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    async with runtime(tmp_path / "o.db") as rl:
        await rl.migrate()
        kept = await rl.trigger(sync_task, None, trace_carrier=given)
        many = await rl.trigger_many(sync_task, [1, 2, 3])
        await rl.worker(concurrency=4, mode=WorkerMode.DRAIN, handle_signals=False).run()
        stored = {run.id: (await rl.runs.get(run.id)).trace_carrier for run in [kept, *many]}
    assert stored[kept.id] == given
    finished = EXPORTER.get_finished_spans()
    producers = named(finished, "trigger otel.sync")
    single, batch = producers
    assert single.attributes is not None and single.attributes["messaging.message.id"] == kept.id
    assert batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in batch.attributes
    consumers = {
        s.attributes["messaging.message.id"]: s for s in named(finished, "execute otel.sync")
    }  # type: ignore[index]
    # The caller's context is the parent of its run's attempt, not the producer span.
    assert consumers[kept.id].context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert consumers[kept.id].parent is not None
    assert consumers[kept.id].parent.span_id == 0xB7AD6B7169203331
    for run in many:
        assert consumers[run.id].parent is not None
        assert consumers[run.id].parent.span_id == batch.context.span_id
    inside = named(finished, "inside the sync task")
    assert sorted(s.parent.span_id for s in inside if s.parent) == sorted(
        s.context.span_id for s in consumers.values()
    )


async def test_an_unparsable_carrier_starts_a_new_root_trace(tmp_path: Path) -> None:
    async with runtime(tmp_path / "o.db") as rl:
        await rl.migrate()
        run = await rl.trigger(sync_task, None, trace_carrier={"traceparent": "garbage"})
        settled = await rl.execute_next()
    assert settled is not None and settled.status is RunStatus.SUCCEEDED
    (consumer,) = named(EXPORTER.get_finished_spans(), "execute otel.sync")
    assert consumer.parent is None and consumer.links == ()
    assert consumer.attributes is not None and consumer.attributes["messaging.message.id"] == run.id


def test_the_trace_follows_a_run_through_sqs_into_a_lambda_handler(
    sqs_client: Any, sqs_queue_factory: Any, tmp_path: Path
) -> None:
    url = sqs_queue_factory("otel")
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])

    async def trigger() -> str:
        async with Runlane(
            lane=sqlite_lane(tmp_path / "o.db", transport=transport),
            queues=[MAIN],
            tasks=[flaky, sync_task],
            observers=[otel_tracing(PROVIDER, PROPAGATOR)],
            environment="otel-test",
        ) as producer:
            await producer.migrate()
            with TRACER.start_as_current_span("POST /reports"):
                return (await producer.trigger(sync_task, None)).id

    run_id = asyncio.run(trigger())
    received = sqs_client.receive_message(QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=5)
    (message,) = received["Messages"]
    lambda_event = {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
            }
        ]
    }
    # The Lambda function's module-level runtime, on the handler's own loop.
    consumer = Runlane(
        lane=sqlite_lane(tmp_path / "o.db", transport=transport),
        queues=[MAIN],
        tasks=[flaky, sync_task],
        observers=[otel_tracing(PROVIDER, PROPAGATOR)],
        environment="otel-test",
    )
    handler = create_sqs_lambda_handler(execute_delivery=consumer.execute_delivery)
    try:
        assert handler(lambda_event, None) == {"batchItemFailures": []}
        done = lambda_event_loop().run_until_complete(consumer.runs.get(run_id))
        assert done.status is RunStatus.SUCCEEDED
    finally:
        lambda_event_loop().run_until_complete(consumer.close())

    finished = EXPORTER.get_finished_spans()
    (request,) = named(finished, "POST /reports")
    (producer_span,) = named(finished, "trigger otel.sync")
    (execute,) = named(finished, "execute otel.sync")
    (inside,) = named(finished, "inside the sync task")
    assert {s.context.trace_id for s in (request, producer_span, execute, inside)} == {
        request.context.trace_id
    }
    assert execute.parent is not None and execute.parent.span_id == producer_span.context.span_id
    assert inside.parent is not None and inside.parent.span_id == execute.context.span_id


def test_the_trace_context_filter_stamps_ids_when_the_record_is_made() -> None:
    record = logging.LogRecord("runlane.x", logging.INFO, __file__, 1, "hello", None, None)
    with TRACER.start_as_current_span("current") as span:
        assert TraceContextFilter().filter(record)
    # Formatted later, outside the span, the ids are still the ones of the span.
    line = json.loads(JsonFormatter().format(record))
    assert line["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert line["span_id"] == f"{span.get_span_context().span_id:016x}"
    assert line["message"] == "hello" and line["level"] == "INFO" and line["logger"] == "runlane.x"


def sampled_provider(sampler: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    provider = TracerProvider(sampler=sampler)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def traceparent(run: Any) -> tuple[int, int, bool]:
    """The trace id, span id and sampled flag of a run's stored carrier."""
    _, trace_id, span_id, flags = run.trace_carrier["traceparent"].split("-")
    return int(trace_id, 16), int(span_id, 16), int(flags, 16) & 1 == 1


#: What task code saw as the current span context, by run id.
SEEN: dict[str, Any] = {}


@task("otel.seen")
async def seen(payload: Any, ctx: Context) -> None:
    SEEN[ctx.run_id] = trace.get_current_span().get_span_context()


async def trigger_and_execute(folder: Path, tracing: Observer, carrier: dict[str, str]) -> Run:
    """Trigger one ``seen`` run carrying ``carrier`` and execute it, observed by ``tracing``."""
    async with Runlane(
        lane=sqlite_lane(folder / "o.db"), queues=[MAIN], tasks=[seen], observers=[tracing]
    ) as rl:
        await rl.migrate()
        run = await rl.trigger(seen, None, trace_carrier=carrier)
        await rl.execute_next()
    return run


@pytest.mark.parametrize("skip_unsampled", [False, True])
async def test_attempts_follow_the_sampling_decision_made_at_the_trigger(
    tmp_path: Path, skip_unsampled: bool
) -> None:
    """ParentBased(TraceIdRatioBased): one decision per trigger, kept by every attempt
    (by the SDK's sampler, or by the observer with skip_unsampled); a run that was not
    sampled still carries its trace, down into task code."""
    provider, exporter = sampled_provider(ParentBased(TraceIdRatioBased(0.5)))
    async with Runlane(
        lane=sqlite_lane(tmp_path / "o.db"),
        queues=[MAIN],
        tasks=[seen],
        observers=[otel_tracing(provider, PROPAGATOR, skip_unsampled=skip_unsampled)],
    ) as rl:
        await rl.migrate()
        runs = [await rl.trigger(seen, n) for n in range(40)]
        await rl.worker(concurrency=4, mode=WorkerMode.DRAIN, handle_signals=False).run()
    finished = exporter.get_finished_spans()
    producers = {span.context.span_id: span for span in named(finished, "trigger otel.seen")}
    consumers = {
        span.attributes["messaging.message.id"]: span  # type: ignore[index]
        for span in named(finished, "execute otel.seen")
    }
    decisions = set()
    for run in runs:
        trace_id, span_id, sampled = traceparent(run)
        decisions.add(sampled)
        # Every run carries its producer's context, sampled or not.
        assert (span_id in producers) is sampled
        assert (run.id in consumers) is sampled
        if sampled:
            consumer = consumers[run.id]
            assert consumer.context.trace_id == trace_id
            assert consumer.parent is not None and consumer.parent.span_id == span_id
            # Current while the handler ran; ended, with the outcome, once the batch
            # that held the attempt's settle was written.
            assert SEEN[run.id] == consumer.context
            assert consumer.attributes is not None
            assert consumer.attributes["runlane.outcome"] == "succeeded"
        # Task code runs in the run's trace either way, with the decision made at the
        # trigger, so what it calls out to propagates the same trace and decision.
        inside = SEEN[run.id]
        assert inside.trace_id == trace_id and inside.trace_flags.sampled is sampled
    assert decisions == {True, False}  # 40 draws at 1/2: both outcomes occurred


async def test_an_unsampled_trigger_still_propagates_so_a_sampling_consumer_continues(
    tmp_path: Path,
) -> None:
    """A producer that samples nothing still stores a carrier; a consumer whose sampler
    ignores the parent's decision records its attempt in that same trace."""
    never, nothing = sampled_provider(ParentBased(ALWAYS_OFF))
    always, recorded = sampled_provider(ALWAYS_ON)

    def runtime_with(provider: TracerProvider) -> Runlane:
        return Runlane(
            lane=sqlite_lane(tmp_path / "o.db"),
            queues=[MAIN],
            tasks=[seen],
            observers=[otel_tracing(provider, PROPAGATOR)],
        )

    async with runtime_with(never) as producer:
        await producer.migrate()
        run = await producer.trigger(seen, None)
    assert nothing.get_finished_spans() == ()
    trace_id, span_id, sampled = traceparent(run)
    assert not sampled
    async with runtime_with(always) as consumer:
        settled = await consumer.execute_next()
    assert settled is not None and settled.status is RunStatus.SUCCEEDED
    (execute,) = recorded.get_finished_spans()
    assert execute.context.trace_id == trace_id
    assert execute.parent is not None and execute.parent.span_id == span_id
    assert [link.context.span_id for link in execute.links] == [span_id]
    assert execute.attributes is not None and execute.attributes["runlane.outcome"] == "succeeded"


async def test_skip_unsampled_starts_no_span_for_an_unsampled_run_even_if_the_sampler_would(
    tmp_path: Path,
) -> None:
    """The trade-off of skip_unsampled: the trigger's decision wins over a consumer
    sampler that would sample; sampled runs are traced as before."""
    never, _ = sampled_provider(ParentBased(ALWAYS_OFF))
    always, recorded = sampled_provider(ALWAYS_ON)
    async with Runlane(
        lane=sqlite_lane(tmp_path / "o.db"),
        queues=[MAIN],
        tasks=[seen],
        observers=[otel_tracing(never, PROPAGATOR)],
    ) as producer:
        await producer.migrate()
        unsampled = await producer.trigger(seen, None)
    async with Runlane(
        lane=sqlite_lane(tmp_path / "o.db"),
        queues=[MAIN],
        tasks=[seen],
        observers=[otel_tracing(always, PROPAGATOR, skip_unsampled=True)],
    ) as consumer:
        sampled = await consumer.trigger(seen, None)
        await consumer.worker(mode=WorkerMode.DRAIN, handle_signals=False).run()
    spans = recorded.get_finished_spans()
    assert [span.name for span in spans] == ["trigger otel.seen", "execute otel.seen"]
    execute = spans[1]
    assert execute.attributes is not None
    assert execute.attributes["messaging.message.id"] == sampled.id
    trace_id, span_id, _ = traceparent(unsampled)
    inside = SEEN[unsampled.id]  # the carrier's own context, not sampled
    assert (inside.trace_id, inside.span_id, inside.trace_flags.sampled) == (
        trace_id,
        span_id,
        False,
    )


UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


@pytest.mark.parametrize(
    "carrier",
    [
        {"traceparent": UNSAMPLED},
        {"traceparent": UNSAMPLED[:-2] + "02"},  # another flag set, still not sampled
        {"traceparent": UNSAMPLED, "tracestate": "vendor=value"},
        {"traceparent": UNSAMPLED, "baggage": "user=ada"},
        {"traceparent": "01" + UNSAMPLED[2:]},  # a later version, read as 00
        {"traceparent": "00-" + "0" * 16 + UNSAMPLED[19:]},  # a trace id of leading zeros
    ],
    ids=["plain", "other-flag", "tracestate", "baggage", "version-01", "zeros-first"],
)
@pytest.mark.parametrize("propagator", [PROPAGATOR, None], ids=["w3c", "global"])
async def test_an_unsampled_run_makes_current_exactly_what_the_propagator_extracts(
    tmp_path: Path, carrier: dict[str, str], propagator: Any
) -> None:
    """skip_unsampled reads a plain traceparent itself; whatever the carrier, task code
    sees the context the propagator would have extracted (ids, flags, trace state,
    remote), and the run's baggage with the global propagator."""
    from opentelemetry import baggage, propagate

    provider, recorded = sampled_provider(ALWAYS_ON)
    baggage_seen: dict[str, Any] = {}

    @task("otel.seen_baggage")
    async def seen_baggage(payload: Any, ctx: Context) -> None:
        SEEN[ctx.run_id] = trace.get_current_span().get_span_context()
        baggage_seen[ctx.run_id] = baggage.get_all()

    async with Runlane(
        lane=sqlite_lane(tmp_path / "o.db"),
        queues=[MAIN],
        tasks=[seen_baggage],
        observers=[otel_tracing(provider, propagator, skip_unsampled=True)],
    ) as rl:
        await rl.migrate()
        run = await rl.trigger(seen_baggage, None, trace_carrier=carrier)
        settled = await rl.execute_next()
    assert settled is not None and settled.status is RunStatus.SUCCEEDED
    expected = (propagator or propagate.get_global_textmap()).extract(carrier)
    assert SEEN[run.id] == trace.get_current_span(expected).get_span_context()
    assert SEEN[run.id].trace_flags.sampled is False
    assert baggage_seen[run.id] == baggage.get_all(expected)
    assert [span.name for span in recorded.get_finished_spans()] == ["trigger otel.seen_baggage"]


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")], ids=["compact", "jsonb"])
@pytest.mark.parametrize("flags", ["00", "01"], ids=["unsampled", "sampled"])
def test_a_stored_carriers_text_is_read_without_decoding_it(
    separators: tuple[str, str], flags: str
) -> None:
    """A run as the SQL drivers build it holds its carrier's JSON text (compact, or as
    PostgreSQL prints jsonb): an unsampled attempt makes the context the propagator
    would extract current and leaves the text undecoded; a sampled one opens a span."""
    from datetime import UTC, datetime

    from runlane.types.runs import stored_trace_carrier

    carrier = {"traceparent": UNSAMPLED[:-2] + flags}
    text = json.dumps(carrier, separators=separators)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    run = Run("r1", "default", "otel.seen", "main", RunStatus.RUNNING, None, 1, 0, now, now,
              now, 2, trace_carrier=text)  # fmt: skip
    provider, _ = sampled_provider(ParentBased(ALWAYS_ON))
    scope = otel_tracing(provider, PROPAGATOR).attempt(Attempt(run, "w1"))
    if flags == "01":
        assert scope is not None and hasattr(scope, "attempt_ended")
        return
    assert isinstance(scope, contextvars.Token)
    try:
        current = trace.get_current_span().get_span_context()
    finally:
        scope.var.reset(scope)
    assert current == trace.get_current_span(PROPAGATOR.extract(carrier)).get_span_context()
    assert stored_trace_carrier(run) == text
    assert run.trace_carrier == carrier


@pytest.mark.parametrize(
    "header",
    [
        "00-" + "0" * 32 + UNSAMPLED[35:],  # an invalid trace id
        UNSAMPLED[:36] + "0" * 16 + "-00",  # an invalid span id
        UNSAMPLED.upper(),  # the W3C format is lower case
        UNSAMPLED + "-extra",  # version 00 has four fields
        "ff" + UNSAMPLED[2:],  # version ff is invalid
    ],
)
async def test_an_unusable_traceparent_starts_a_new_trace_even_with_skip_unsampled(
    tmp_path: Path, header: str
) -> None:
    """A traceparent the propagator rejects is no decision: the attempt is a root, and
    the sampler (here: always) records it."""
    provider, recorded = sampled_provider(ALWAYS_ON)
    tracing = otel_tracing(provider, None, skip_unsampled=True)
    run = await trigger_and_execute(tmp_path, tracing, {"traceparent": header})
    (execute,) = named(recorded.get_finished_spans(), "execute otel.seen")
    assert execute.parent is None and list(execute.links) == []
    assert SEEN[run.id] == execute.context and execute.context.trace_id != int(UNSAMPLED[3:35], 16)


@pytest.mark.parametrize("global_provider", [False, True], ids=["no-op provider", "no global SDK"])
@pytest.mark.parametrize("carrier", [None, {"traceparent": UNSAMPLED[:-2] + "01"}])
async def test_without_an_sdk_task_code_runs_in_the_runs_or_the_callers_context(
    tmp_path: Path, carrier: dict[str, str] | None, global_provider: bool
) -> None:
    """With the API's no-op tracer there is no span to make current: task code sees the
    stored carrier's context, or, for a run without one, the caller's own span."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # no SDK set
    provider = None if global_provider else trace.NoOpTracerProvider()
    async with Runlane(
        lane=sqlite_lane(tmp_path / "o.db"),
        queues=[MAIN],
        tasks=[seen],
        observers=[otel_tracing(provider, PROPAGATOR)],
    ) as rl:
        await rl.migrate()
        run = await rl.trigger(seen, None, trace_carrier=carrier)
        with TRACER.start_as_current_span("the caller") as caller:
            settled = await rl.execute_next()
            assert trace.get_current_span() is caller  # left as it was
    assert settled is not None and settled.status is RunStatus.SUCCEEDED
    if carrier is None:
        assert SEEN[run.id] == caller.get_span_context()
    else:
        expected = trace.get_current_span(PROPAGATOR.extract(carrier)).get_span_context()
        assert SEEN[run.id] == expected and expected.is_valid


async def test_without_an_sdk_a_run_with_no_carrier_gets_no_attempt_scope_or_carrier(
    tmp_path: Path,
) -> None:
    """Nothing would change inside such a scope, and an attempt without one settles on
    the runtime's cheaper path: the observer wraps only runs whose carrier it must make
    current, and a trigger outside any trace stores no carrier."""
    tracing = otel_tracing()  # the global provider: the API's proxy, no SDK set
    async with Runlane(
        lane=sqlite_lane(tmp_path / "o.db"), queues=[MAIN], tasks=[seen], observers=[tracing]
    ) as rl:
        await rl.migrate()
        plain = await rl.trigger(seen, None)
        carried = await rl.trigger(seen, None, trace_carrier={"traceparent": UNSAMPLED})
        assert plain.trace_carrier is None
        assert tracing.attempt(Attempt(plain, "w")) is None
        # The carried context, set as the hook returns: the runtime resets the token.
        token = tracing.attempt(Attempt(carried, "w"))
        assert isinstance(token, contextvars.Token)
        assert trace.get_current_span().get_span_context().trace_id == int(UNSAMPLED[3:35], 16)
        token.var.reset(token)
        assert not trace.get_current_span().get_span_context().is_valid
        with TRACER.start_as_current_span("a request"):  # a trace to carry: a producer
            inside = await rl.trigger(seen, None)
        assert inside.trace_carrier is not None
        # With an SDK every attempt is wrapped, carrier or not.
        assert otel_tracing(PROVIDER).attempt(Attempt(plain, "w")) is not None
        await rl.worker(concurrency=2, mode=WorkerMode.DRAIN, handle_signals=False).run()
        runs = [await rl.runs.get(run.id) for run in (plain, carried, inside)]
    assert [run.status for run in runs] == [RunStatus.SUCCEEDED] * 3
    assert SEEN[carried.id].trace_id == int(UNSAMPLED[3:35], 16)


async def test_a_failed_trigger_ends_its_producer_span_as_an_error(tmp_path: Path) -> None:
    async with runtime(tmp_path / "o.db") as rl:
        await rl.migrate()
        with pytest.raises(RunlaneError) as raised:
            await rl.trigger(sync_task, None, connection=object())
    (producer,) = named(EXPORTER.get_finished_spans(), "trigger otel.sync")
    assert producer.status.status_code is StatusCode.ERROR
    assert producer.status.description == f"{type(raised.value).__name__}: {raised.value}"
    assert [event.name for event in producer.events] == ["exception"]
    # The producer span is no longer current once the trigger has failed.
    assert not trace.get_current_span().get_span_context().is_valid


#: The runtime a ``parent`` task triggers its child through (set by the test).
CHILDREN: dict[str, Any] = {}


@task("otel.parent")
async def parent(payload: Any, ctx: Context) -> None:
    SEEN[ctx.run_id] = trace.get_current_span().get_span_context()
    CHILDREN[ctx.run_id] = await CHILDREN["runtime"].trigger(seen, None)


@pytest.mark.parametrize(
    ("sampler", "skip_unsampled"),
    [
        (ParentBased(ALWAYS_OFF), True),  # the handler-only context, no span
        (ParentBased(ALWAYS_OFF), False),  # the SDK's non-recording span
        (ParentBased(ALWAYS_OFF), None),  # left unset: the sampler is sure to drop it
        (None, False),  # no SDK: the handler-only context of the stored carrier
    ],
    ids=["skip", "sdk-decides", "auto", "no-sdk"],
)
async def test_an_unsampled_attempt_passes_its_trace_to_the_runs_it_triggers(
    tmp_path: Path, sampler: Any, skip_unsampled: bool | None
) -> None:
    """A run triggered by task code of an attempt that was not sampled carries the
    parent's trace and its decision, so the whole tree stays one trace, unsampled:
    nothing is recorded, and the child's task code runs in that trace too."""
    if sampler is None:
        provider: Any = trace.NoOpTracerProvider()
        recorded = None
    else:
        provider, recorded = sampled_provider(sampler)
    carrier = {"traceparent": UNSAMPLED}
    async with Runlane(
        lane=sqlite_lane(tmp_path / "o.db"),
        queues=[MAIN],
        tasks=[parent, seen],
        observers=[otel_tracing(provider, PROPAGATOR, skip_unsampled=skip_unsampled)],
    ) as rl:
        await rl.migrate()
        CHILDREN["runtime"] = rl
        run = await rl.trigger(parent, None, trace_carrier=carrier)
        await rl.worker(concurrency=1, mode=WorkerMode.DRAIN, handle_signals=False).run()
        child = CHILDREN.pop(run.id)
        assert (await rl.runs.get(child.id)).status is RunStatus.SUCCEEDED  # type: ignore[union-attr]
    trace_id = int(UNSAMPLED[3:35], 16)
    assert SEEN[run.id].trace_id == trace_id and not SEEN[run.id].trace_flags.sampled
    child_trace, _, child_sampled = traceparent(child)
    assert (child_trace, child_sampled) == (trace_id, False)
    assert SEEN[child.id].trace_id == trace_id and not SEEN[child.id].trace_flags.sampled
    if recorded is not None:
        assert recorded.get_finished_spans() == ()


@pytest.mark.parametrize(
    ("sampler", "skip_unsampled", "skipped"),
    [
        (ParentBased(TraceIdRatioBased(0.5)), None, True),
        (TracerProvider().sampler, None, True),  # the SDK's default: ParentBased(ALWAYS_ON)
        (ParentBased(ALWAYS_ON, remote_parent_not_sampled=ALWAYS_ON), None, False),
        (ALWAYS_OFF, None, False),  # not parent-based: the sampler is asked
        (ParentBased(TraceIdRatioBased(0.5)), False, False),
    ],
    ids=["ratio", "sdk-default", "samples-unsampled-parents", "not-parent-based", "off"],
)
async def test_left_unset_skip_unsampled_follows_a_sampler_sure_to_drop_the_attempt(
    tmp_path: Path, sampler: Any, skip_unsampled: bool | None, skipped: bool
) -> None:
    """An unsampled run's attempt starts no span exactly when the provider's sampler
    would drop it whatever it is asked (parent-based, a fixed drop for an unsampled
    remote parent): task code then runs in the carrier's own span; otherwise the SDK
    starts a child span (a new span id), recorded or not as its sampler decides."""
    provider, recorded = sampled_provider(sampler)
    tracing = otel_tracing(provider, PROPAGATOR, skip_unsampled=skip_unsampled)
    run = await trigger_and_execute(tmp_path, tracing, {"traceparent": UNSAMPLED})
    trace_id, span_id, _ = traceparent(run)
    assert SEEN[run.id].trace_id == trace_id
    assert (SEEN[run.id].span_id == span_id) is skipped
    executed = named(recorded.get_finished_spans(), "execute otel.seen")
    if skipped:
        assert executed == []
    else:  # the SDK's span: recorded if its sampler sampled it
        assert len(executed) == int(SEEN[run.id].trace_flags.sampled)
