"""A dead-lettered delivery attempt is its own outcome for every observer: the log
line, the Prometheus counter, the OpenTelemetry span and the CLI's live line all say
``dead_lettered`` (not ``failed``), with the dead letter's reason."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runlane import (
    Attempt,
    AttemptOutcome,
    DeliveryContext,
    Message,
    Observer,
    Outcome,
    RetryPolicy,
    Runlane,
    RunStatus,
    queue,
    sqlite_lane,
    subscription,
    topic,
)
from runlane.cli.observe import LiveLines
from runlane.logs import JsonFormatter
from runlane.metrics import prometheus_metrics
from runlane.otel import otel_tracing

MAIN = queue("main", default=True)
ORDERS = topic("orders")


async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
    return Outcome.dead_letter("malformed order")


async def explode(message: Message[Any], ctx: DeliveryContext) -> None:
    raise ValueError("ledger offline")


REFUSES = subscription("orders.refuses", topic=ORDERS, handler=refuse)
EXPLODES = subscription(
    "orders.explodes", topic=ORDERS, handler=explode, retry=RetryPolicy(max_attempts=1)
)


class Recorder(Observer):
    def __init__(self) -> None:
        self.settles: list[Attempt] = []

    def settled(self, attempt: Attempt) -> None:
        self.settles.append(attempt)


class Observed:
    def __init__(self, rl: Runlane, recorder: Recorder, registry: CollectorRegistry) -> None:
        self.rl = rl
        self.recorder = recorder
        self.registry = registry


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JsonFormatter())
    execution = logging.getLogger("runlane.execution")
    previous = execution.level
    execution.addHandler(handler)
    execution.setLevel(logging.DEBUG)
    yield lines
    execution.removeHandler(handler)
    execution.setLevel(previous)


@pytest.fixture
async def observed(tmp_path: Path, exporter: InMemorySpanExporter) -> AsyncIterator[Observed]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    recorder = Recorder()
    rl = Runlane(
        lane=sqlite_lane(tmp_path / "dl.db"),
        queues=[MAIN],
        tasks=[],
        topics=[ORDERS],
        subscriptions=[REFUSES, EXPLODES],
        environment="dl-observing",
        observers=[
            recorder,
            prometheus_metrics(registry),
            otel_tracing(provider, TraceContextTextMapPropagator()),
        ],
    )
    await rl.migrate()
    async with rl:
        yield Observed(rl, recorder, registry)


async def drain(rl: Runlane) -> None:
    while await rl.execute_next() is not None:
        pass


async def test_observers_see_a_dead_lettered_outcome_with_its_reason(observed: Observed) -> None:
    await observed.rl.publish(ORDERS, {"id": 1})
    await drain(observed.rl)
    by_subscription = {a.run.task_id: a for a in observed.recorder.settles}
    refused, exploded = by_subscription["orders.refuses"], by_subscription["orders.explodes"]
    assert refused.outcome is AttemptOutcome.DEAD_LETTERED
    assert refused.dead_letter_reason == "malformed order"
    assert exploded.outcome is AttemptOutcome.DEAD_LETTERED
    assert exploded.dead_letter_reason == "max_attempts_exceeded"
    assert exploded.settled is not None
    assert exploded.settled.status is RunStatus.DEAD_LETTERED


async def test_the_log_line_is_a_warning_named_run_dead_lettered(
    observed: Observed, log_lines: io.StringIO
) -> None:
    await observed.rl.publish(ORDERS, {"id": 1})
    await drain(observed.rl)
    records = [json.loads(line) for line in log_lines.getvalue().splitlines()]
    ends = {r["task_id"]: r for r in records if r["event"] != "run.started"}
    refused, exploded = ends["orders.refuses"], ends["orders.explodes"]
    for record in (refused, exploded):
        assert record["event"] == "run.dead_lettered"
        assert record["level"] == "WARNING"
        assert record["outcome"] == "dead_lettered"
    assert refused["reason"] == "malformed order" and "error_type" not in refused
    assert exploded["reason"] == "max_attempts_exceeded"
    assert exploded["error_type"] == "ValueError" and exploded["error_code"] == "task_failed"
    assert "ledger offline" in exploded["exc_info"]
    assert re.search(
        r"attempt 1 dead_lettered in [0-9.]+s: max_attempts_exceeded; "
        r"ValueError: Task raised ValueError\.$",
        exploded["message"],
    )


async def test_prometheus_counts_dead_letters_apart_from_failed_runs(observed: Observed) -> None:
    await observed.rl.publish(ORDERS, {"id": 1})
    await observed.rl.publish(ORDERS, {"id": 2})
    await drain(observed.rl)
    text = generate_latest(observed.registry).decode()
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    for name in ("orders.refuses", "orders.explodes"):
        labels = frozenset({"queue": "main", "task": name}.items())
        assert samples[("runlane_runs_dead_lettered_total", labels)] == 2
        assert samples[("runlane_runs_failed_total", labels)] == 0  # the series is kept
        with_outcome = frozenset({*labels, ("outcome", "dead_lettered")})
        assert samples[("runlane_attempt_duration_seconds_count", with_outcome)] == 2


async def test_the_span_is_an_error_with_the_dead_lettered_outcome_and_reason(
    observed: Observed, exporter: InMemorySpanExporter
) -> None:
    await observed.rl.publish(ORDERS, {"id": 1})
    await drain(observed.rl)
    spans = {s.name: s for s in exporter.get_finished_spans() if s.name.startswith("execute")}
    refused, exploded = spans["execute orders.refuses"], spans["execute orders.explodes"]
    for span in (refused, exploded):
        assert span.attributes is not None
        assert span.attributes["runlane.outcome"] == "dead_lettered"
        assert span.status.status_code is StatusCode.ERROR
    assert refused.attributes is not None and exploded.attributes is not None
    assert refused.attributes["runlane.dead_letter_reason"] == "malformed order"
    assert refused.attributes["error.type"] == "dead_lettered"
    assert refused.status.description == "malformed order"
    assert exploded.attributes["runlane.dead_letter_reason"] == "max_attempts_exceeded"
    assert exploded.attributes["error.type"] == "ValueError"
    assert [event.name for event in exploded.events] == ["exception"]


@pytest.mark.parametrize("as_json", [False, True])
async def test_the_cli_live_line_shows_the_dead_letter_and_its_reason(
    observed: Observed, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    observed.rl.add_observer(LiveLines(as_json=as_json))
    await observed.rl.publish(ORDERS, {"id": 1})
    await drain(observed.rl)
    out = capsys.readouterr().out
    if as_json:
        lines = {line["task_id"]: line for line in map(json.loads, out.splitlines())}
        refused, exploded = lines["orders.refuses"], lines["orders.explodes"]
        assert refused["status"] == "dead_lettered"
        assert refused["dead_letter_reason"] == "malformed order"
        assert refused["failure"] is None
        assert exploded["dead_letter_reason"] == "max_attempts_exceeded"
        assert exploded["failure"] == "task_failed: Task raised ValueError."
    else:
        assert "→ dead_lettered (malformed order)" in out
        reason = "max_attempts_exceeded; task_failed: Task raised ValueError."
        assert f"→ dead_lettered ({reason})" in out
