"""OpenTelemetry for schedule-created runs: a tick's materialisation is a producer span
whose context the runs carry, so each attempt of a scheduled run is its child, as a
triggered run's attempts are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry.trace import SpanKind
from tests.integration.test_otel import EXPORTER, MAIN, PROPAGATOR, PROVIDER, named, spans

from runlane import Context, ManualClock, Runlane, RunStatus, schedule, sqlite_lane, task
from runlane.otel import otel_tracing

__all__ = ["spans"]


@task("otel.nightly", schedules=[schedule("otel.every-minute", every="1m")])
async def nightly(payload: Any, ctx: Context) -> None:
    return None


@task("otel.hourly", schedules=[schedule("otel.every-hour", every="1h")])
async def hourly(payload: Any, ctx: Context) -> None:
    return None


async def test_a_scheduled_run_gets_a_producer_span_and_its_attempt_joins_that_trace(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    rl = Runlane(
        lane=sqlite_lane(tmp_path / "s.db"),
        queues=[MAIN],
        tasks=[nightly, hourly],
        observers=[otel_tracing(PROVIDER, PROPAGATOR)],
        environment="otel-schedules",
        clock=clock,
    )
    async with rl:
        await rl.tick()  # first seen: fires from the next slot on
        clock.advance("2h")
        assert (await rl.tick()).schedules_materialized == 2
        executed = [await rl.execute_next(), await rl.execute_next()]
    assert all(run is not None and run.status is RunStatus.SUCCEEDED for run in executed)

    finished = EXPORTER.get_finished_spans()
    for task_id in ("otel.nightly", "otel.hourly"):
        (producer,) = named(finished, f"trigger {task_id}")
        (consumer,) = named(finished, f"execute {task_id}")
        assert producer.kind is SpanKind.PRODUCER and producer.parent is None
        assert consumer.parent is not None
        assert consumer.parent.span_id == producer.context.span_id
        assert consumer.context.trace_id == producer.context.trace_id
        assert producer.attributes is not None
        assert producer.attributes["messaging.destination.name"] == "main"
        assert producer.attributes["runlane.task_id"] == task_id
    scheduled = {run.task_id: run for run in executed if run is not None}
    assert scheduled["otel.nightly"].trace_carrier is not None
    assert scheduled["otel.nightly"].source.schedule_id == "otel.every-minute"
