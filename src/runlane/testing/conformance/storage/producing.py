"""Producing runs: trigger, bulk trigger, run_now, payloads."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from runlane import (
    ErrorCode,
    ManualClock,
    RunlaneError,
    RunStatus,
)
from runlane.testing import drain
from runlane.testing.conformance.storage.support import (
    MAIN,
    OTHER,
    Factory,
    Order,
    _all_runs,
    _event_types,
    _recorder,
)
from runlane.types.runs import Run, RunSourceType


async def test_trigger_commits_a_queued_run_with_its_created_event(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    run = await rl.trigger(record, {"order_id": 7}, trace_carrier={"traceparent": "00-abc-def-01"})
    stored = await rl.runs.get(run.id)
    assert stored.status is RunStatus.QUEUED
    assert stored.payload == {"order_id": 7, "note": ""}
    assert stored.queue == "main" and stored.task_id == "orders.record"
    assert stored.attempt == 0 and stored.source.type is RunSourceType.TRIGGER
    assert stored.trace_carrier == {"traceparent": "00-abc-def-01"}
    assert await _event_types(rl, run.id) == ["run.created"]


async def test_a_lone_trigger_returns_its_run_as_stored(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    elsewhere = timezone(timedelta(hours=5, minutes=30))
    due = (datetime.now(UTC) + timedelta(hours=1)).astimezone(elsewhere)
    runs = [
        await rl.trigger(record, {"order_id": 1}),
        await rl.trigger(record, {"order_id": 2}, run_at=due, concurrency_key="tenant-1"),
    ]
    for run in runs:
        assert await rl.runs.get(run.id) == run
        # Equal instants are not enough: the returned times are UTC, as a read's are.
        assert run.run_at.utcoffset() == run.created_at.utcoffset() == timedelta(0)
    assert runs[1].run_at == due and runs[1].status is RunStatus.SCHEDULED


async def test_trigger_accepts_a_schema_instance_and_the_handler_gets_one(
    make_runtime: Factory,
) -> None:
    seen, record = _recorder()
    rl = await make_runtime([record])
    await rl.trigger(record, Order(order_id=3, note="x"))
    (done,) = await drain(rl)
    assert done.status is RunStatus.SUCCEEDED
    assert seen == [Order(order_id=3, note="x")]
    assert done.result == {"order_id": 3, "attempt": 1}


async def test_delay_and_run_at_make_a_scheduled_run_that_waits(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    delayed = await rl.trigger(record, {"order_id": 1}, delay="10s")
    later = await rl.trigger(record, {"order_id": 2}, run_at=clock.now() + timedelta(minutes=1))
    assert delayed.status is RunStatus.SCHEDULED and later.status is RunStatus.SCHEDULED
    assert await rl.execute_next() is None
    clock.advance("10s")
    first = await rl.execute_next()
    assert first is not None and first.id == delayed.id
    assert await rl.execute_next() is None
    clock.advance("1m")
    second = await rl.execute_next()
    assert second is not None and second.id == later.id


async def test_queue_override_routes_the_run_and_workers_filter_by_queue(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    run = await rl.trigger(record, {"order_id": 1}, queue=OTHER)
    assert run.queue == "other"
    assert await rl.execute_next(queues=[MAIN]) is None
    done = await rl.execute_next(queues=[OTHER])
    assert done is not None and done.id == run.id


async def test_trigger_many_creates_every_run_in_order(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    runs = await rl.trigger_many(record, [{"order_id": i} for i in range(2500)])
    assert len(runs) == 2500 and len({r.id for r in runs}) == 2500
    assert [r.payload["order_id"] for r in runs] == list(range(2500))
    assert all(r.status is RunStatus.QUEUED for r in runs)
    stats = await rl.queue_stats()
    main_stats = next(s for s in stats if s.queue == "main")
    assert main_stats.counts[RunStatus.QUEUED] == 2500


async def test_runs_created_in_bulk_read_back_as_returned_with_their_created_event(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    due = datetime.now(UTC) + timedelta(hours=1)
    carrier = {"traceparent": "00-abc-def-01"}
    runs = await rl.trigger_many(
        record,
        [{"order_id": i, "note": "ü"} for i in range(300)],
        run_at=due,
        concurrency_key="tenant-1",
        trace_carrier=carrier,
    )
    for run in (runs[0], runs[137], runs[-1]):
        assert await rl.runs.get(run.id) == run
        (created,) = await rl.runs.events(run.id)
        assert created.type.value == "run.created" and created.sequence == 1
        assert created.occurred_at == run.created_at
        assert created.data == {
            "task_id": "orders.record",
            "queue": "main",
            "run_at": run.run_at.isoformat(),
            "source": {"type": "trigger"},
        }
    assert runs[0].status is RunStatus.SCHEDULED and runs[0].trace_carrier == carrier


async def test_bulk_payloads_and_keys_with_escapes_read_back_as_written(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    awkward = 'tab\there\nnewline\rreturn \\ backslash \\N \\. "quoted" ü 1e16'
    runs = await rl.trigger_many(
        record,
        [{"order_id": i, "note": awkward} for i in range(200)],
        concurrency_key="tenant\t\\1",
    )
    for run in (runs[0], runs[-1]):
        stored = await rl.runs.get(run.id)
        assert stored == run
        assert stored.payload == {"order_id": run.payload["order_id"], "note": awkward}
        assert stored.concurrency_key == "tenant\t\\1"


async def test_concurrent_triggers_each_create_their_own_run(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    # Enough at once for one shared write to take the bulk path, across queues and due times.
    runs = await asyncio.gather(
        *(
            rl.trigger(
                record,
                {"order_id": i},
                queue=OTHER if i % 3 == 0 else None,
                delay="1h" if i % 7 == 0 else None,
            )
            for i in range(150)
        )
    )
    assert [r.payload["order_id"] for r in runs] == list(range(150))
    assert len({r.id for r in runs}) == 150
    for run in runs[::7]:
        assert await rl.runs.get(run.id) == run
        assert await _event_types(rl, run.id) == ["run.created"]
    assert runs[0].queue == "other" and runs[0].status is RunStatus.SCHEDULED
    assert runs[1].queue == "main" and runs[1].status is RunStatus.QUEUED
    good = rl.trigger(record, {"order_id": 99})
    results = await asyncio.gather(
        rl.trigger(record, {"order_id": "x"}), good, return_exceptions=True
    )
    assert isinstance(results[0], RunlaneError) and results[0].code is ErrorCode.PAYLOAD_INVALID
    assert isinstance(results[1], Run) and (await rl.runs.get(results[1].id)) == results[1]
    assert len(await _all_runs(rl)) == 151


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
