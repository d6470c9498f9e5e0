"""Isolation conformance: one bad task, result, schedule or duty fails only itself.

Use it like the storage suite (same ``lane_factory`` and ``environment`` fixtures)::

    from runlane.testing.conformance.isolation import *  # noqa: F403
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    Release,
    Run,
    Runlane,
    RunlaneError,
    RunStatus,
    WorkerMode,
    schedule,
    task,
)
from runlane.operator import tick_report_view
from runlane.ports.storage import LeaseRequest, QueuePolicy
from runlane.ports.transport import (
    DeliveryOutcome,
    PublishFailure,
    PublishOutcome,
    WakeupAttempt,
    WakeupFailed,
)
from runlane.testing.conformance.storage.support import (
    MAIN,
    OTHER,
    Factory,
    TransportFactory,
    make_runtime,
    make_transport_runtime,
)
from runlane.transport.memory import MemoryTransport
from runlane.types.runs import RunSourceType


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no description")


# -- task code that misbehaves fails its own attempt -------------------------------------


async def test_an_exception_whose_str_raises_fails_the_attempt(make_runtime: Factory) -> None:
    @task("unprintable")
    async def unprintable(payload: Any, ctx: Context) -> None:
        raise _Unprintable

    rl = await make_runtime([unprintable])
    run = await rl.trigger(unprintable, None)
    settled = await rl.execute_next()
    assert settled is not None and settled.id == run.id
    assert settled.status is RunStatus.RETRYING
    assert settled.failure is not None and settled.failure.code == "task_failed"
    assert "_Unprintable" in settled.failure.message


@pytest.mark.parametrize("kind", ["sync", "time-limited"])
async def test_a_result_nested_too_deep_fails_the_attempt_at_once(
    make_runtime: Factory, kind: str
) -> None:
    if kind == "sync":

        @task("deep")
        def deep(payload: Any, ctx: Context) -> Any:
            return _nested(10_000)

    else:

        @task("deep", timeout="10s")
        async def deep(payload: Any, ctx: Context) -> Any:
            return _nested(10_000)

    rl = await make_runtime([deep])
    run = await rl.trigger(deep, None)
    settled = await rl.execute_next()
    assert settled is not None and settled.id == run.id
    assert settled.status is RunStatus.FAILED
    assert settled.failure is not None and settled.failure.code == "task_failed"
    assert settled.failure.retryable is False
    assert (await rl.runs.get(run.id)).status is RunStatus.FAILED


async def test_a_result_nested_within_the_cap_still_succeeds(make_runtime: Factory) -> None:
    @task("nested")
    def nested(payload: Any, ctx: Context) -> Any:
        return _nested(50)

    rl = await make_runtime([nested])
    await rl.trigger(nested, None)
    settled = await rl.execute_next()
    assert settled is not None and settled.status is RunStatus.SUCCEEDED
    assert settled.result == _nested(50)


@pytest.mark.parametrize("kind", ["async", "sync", "time-limited"])
async def test_a_task_cancelling_itself_fails_its_attempt_as_retryable(
    make_runtime: Factory, kind: str
) -> None:
    if kind == "sync":

        @task("self-cancel")
        def self_cancel(payload: Any, ctx: Context) -> None:
            raise asyncio.CancelledError

    else:

        @task("self-cancel", timeout="10s" if kind == "time-limited" else None)
        async def self_cancel(payload: Any, ctx: Context) -> None:
            raise asyncio.CancelledError

    rl = await make_runtime([self_cancel])
    run = await rl.trigger(self_cancel, None)
    settled = await rl.execute_next()
    assert settled is not None and settled.id == run.id
    assert settled.status is RunStatus.RETRYING
    assert settled.failure is not None and settled.failure.retryable
    assert "CancelledError" in settled.failure.message


@pytest.mark.parametrize("exit_type", [SystemExit, KeyboardInterrupt])
@pytest.mark.parametrize("kind", ["async", "sync", "time-limited"])
async def test_an_exit_from_task_code_settles_the_attempt_then_proceeds(
    make_runtime: Factory, exit_type: type[BaseException], kind: str
) -> None:
    if kind == "sync":

        @task("exits")
        def exits(payload: Any, ctx: Context) -> None:
            raise exit_type

    else:

        @task("exits", timeout="10s" if kind == "time-limited" else None)
        async def exits(payload: Any, ctx: Context) -> None:
            raise exit_type

    rl = await make_runtime([exits])
    run = await rl.trigger(exits, None)
    with pytest.raises(exit_type):
        await rl.execute_next()
    stored = await rl.runs.get(run.id)
    assert stored.status is RunStatus.RETRYING and stored.lease is None
    assert stored.failure is not None and stored.failure.retryable
    assert exit_type.__name__ in stored.failure.message


@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize(
    "release",
    [Release(float("nan")), Release(1e300), Release("soon"), Release(1, _Unprintable())],  # type: ignore[arg-type]
    ids=["nan", "overflow", "not-a-duration", "unprintable-reason"],
)
async def test_a_release_that_cannot_be_honoured_fails_the_attempt(
    make_runtime: Factory, kind: str, release: Release
) -> None:
    if kind == "sync":

        @task("releases")
        def releases(payload: Any, ctx: Context) -> Release:
            return release

    else:

        @task("releases")
        async def releases(payload: Any, ctx: Context) -> Release:
            return release

    rl = await make_runtime([releases])
    run = await rl.trigger(releases, None)
    settled = await rl.execute_next()
    assert settled is not None and settled.id == run.id
    assert settled.status is RunStatus.FAILED and settled.lease is None
    assert settled.failure is not None and settled.failure.code == "task_failed"


async def test_a_poison_result_through_execute_delivery_fails_only_its_run(
    make_transport_runtime: TransportFactory,
) -> None:
    @task("deep")
    def deep(payload: Any, ctx: Context) -> Any:
        return _nested(10_000) if payload["poison"] else "ok"

    rl, transport = await make_transport_runtime([deep])
    runs = await rl.trigger_many(deep, [{"poison": i == 1} for i in range(3)])
    results = [await rl.execute_delivery(w.message) for w in transport.published]
    assert [r.outcome for r in results] == [DeliveryOutcome.EXECUTED] * 3
    statuses = [(await rl.runs.get(r.id)).status for r in runs]
    assert statuses == [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.SUCCEEDED]


@pytest.mark.parametrize("poison", ["deep-result", "unprintable", "self-cancel", "bad-release"])
async def test_one_poison_attempt_among_good_ones_in_a_worker_fails_alone(
    make_runtime: Factory, poison: str
) -> None:
    @task("mixed")
    def mixed(payload: Any, ctx: Context) -> Any:
        if not payload["poison"]:
            return payload["n"]
        if poison == "deep-result":
            return _nested(10_000)
        if poison == "unprintable":
            raise _Unprintable
        if poison == "self-cancel":
            raise asyncio.CancelledError
        return Release(float("nan"))

    rl = await make_runtime([mixed])
    runs = await rl.trigger_many(mixed, [{"n": n, "poison": n == 4} for n in range(10)])
    worker = rl.worker(concurrency=10, handle_signals=False, mode=WorkerMode.DRAIN)
    await asyncio.wait_for(worker.run(), 30)
    settled = [await rl.runs.get(run.id) for run in runs]
    assert [r.status for i, r in enumerate(settled) if i != 4] == [RunStatus.SUCCEEDED] * 9
    assert [r.result for i, r in enumerate(settled) if i != 4] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert settled[4].status in (RunStatus.FAILED, RunStatus.RETRYING)
    assert settled[4].lease is None and settled[4].failure is not None


# -- triggers refuse what would poison a batch -------------------------------------------


async def test_an_oversized_trace_carrier_is_refused_at_trigger_and_stores_nothing(
    make_runtime: Factory,
) -> None:
    from runlane.types.carriers import MAX_TRACE_CARRIER_BYTES

    @task("traced")
    async def traced(payload: Any, ctx: Context) -> None:
        return None

    rl = await make_runtime([traced])
    carrier = {"traceparent": "00-abc-def-01", "baggage": "x" * MAX_TRACE_CARRIER_BYTES}
    with pytest.raises(RunlaneError) as raised:
        await rl.trigger(traced, None, trace_carrier=carrier)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert str(MAX_TRACE_CARRIER_BYTES) in raised.value.message
    with pytest.raises(RunlaneError):
        await rl.trigger_many(traced, [None, None], trace_carrier=carrier)
    assert (await rl.runs.list()).data == []
    fits = {"baggage": "x" * (MAX_TRACE_CARRIER_BYTES - len("baggage"))}
    run = await rl.trigger(traced, None, trace_carrier=fits)
    assert (await rl.runs.get(run.id)).trace_carrier == fits


# -- tick: one poison item among good ones -----------------------------------------------


async def _runs(rl: Runlane) -> list[Run]:
    return list((await rl.runs.list(limit=500)).data)


async def _strand_a_lease(rl: Runlane, clock: ManualClock) -> Run:
    """A run whose worker vanished: its lease expires 30s from now."""
    lease = LeaseRequest("vanished-worker", clock.now() + timedelta(seconds=30))
    (claimed,) = await rl.storage.claim_due_runs(
        rl.environment, [QueuePolicy(MAIN.name)], 1, lease, clock.now()
    )
    return claimed


def _poison_schedules(good: Sequence[Any]) -> list[Any]:
    """Schedules ``schedule(...)`` refuses, built around its checks (as a bug or an older
    release might): a cron that never fires, and an id too long for its run keys."""
    never = replace(schedule("never", every="1m"), every=None, cron="0 0 31 2 *")
    long_id = replace(schedule("long", every="1m"), id="l" * 250)
    return [*good[:1], never, long_id, *good[1:]]


async def test_one_bad_schedule_among_good_ones_fails_alone_and_maintenance_goes_on(
    make_runtime: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    good = [schedule("minutely", every="1m"), schedule("cron.minutely", cron="* * * * *")]

    @task("report", schedules=_poison_schedules(good))
    async def report(payload: Any, ctx: Context) -> None:
        return None

    rl = await make_runtime([report], clock=clock)
    await rl.tick()  # the schedules are first seen: their slots from now on fire
    stranded = await _strand_a_lease(rl, clock) if await rl.trigger(report, None) else None
    assert stranded is not None
    clock.advance("1m")
    with caplog.at_level(logging.ERROR, logger="runlane"):
        first = await rl.tick()
    assert first.schedules_materialized == 2
    assert first.failures == {"schedules": 2}
    assert tick_report_view(first)["failed_schedules"] == 2
    assert first.leases_recovered == 1
    assert (await rl.runs.get(stranded.id)).status is RunStatus.RETRYING
    failing = [r for r in caplog.records if r.exc_info and "never" in r.getMessage()]
    assert failing and "l" * 250 in caplog.text
    clock.advance("1m")
    second = await rl.tick()
    assert second.schedules_materialized == 2 and second.failures == {"schedules": 2}
    fired = [r for r in await _runs(rl) if r.source.type is RunSourceType.SCHEDULE]
    assert sorted({str(r.source.schedule_id) for r in fired}) == ["cron.minutely", "minutely"]
    assert len(fired) == 4
    listed = {info.id: info for info in await rl.schedules.list()}
    assert listed["never"].next_fire_at is None
    assert listed["minutely"].next_fire_at == datetime(2030, 1, 1, 12, 3, tzinfo=UTC)


class _BrokenTransport(MemoryTransport):
    """A transport with a bug: publishing raises something that is no RunlaneError."""

    async def publish_wakeups(self, attempts: Sequence[WakeupAttempt]) -> list[PublishOutcome]:
        raise KeyError("a bug in the transport")


async def test_a_failing_duty_is_counted_and_the_other_duties_still_run(
    make_transport_runtime: TransportFactory, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()

    @task("keyed", idempotency_key_ttl="1m")
    async def keyed(payload: Any, ctx: Context) -> None:
        return None

    rl, _ = await make_transport_runtime(
        [keyed],
        clock=clock,
        transport=_BrokenTransport([MAIN, OTHER]),
        dispatch="deferred",
        retention="1h",
    )
    await rl.trigger(keyed, None, idempotency_key="done")
    done = await rl.execute_next()
    assert done is not None and done.status is RunStatus.SUCCEEDED
    stranded = await rl.trigger(keyed, None, idempotency_key="stranded")
    await _strand_a_lease(rl, clock)
    clock.advance("2h")
    with caplog.at_level(logging.ERROR, logger="runlane"):
        report = await rl.tick()
    assert report.failures == {"outbox_publish": 1}
    assert report.leases_recovered == 1
    assert report.idempotency_keys_released == 1
    assert report.runs_pruned == 1
    assert (await rl.runs.get(stranded.id)).status is RunStatus.RETRYING
    (record,) = [r for r in caplog.records if "outbox_publish" in r.getMessage()]
    assert record.exc_info is not None and record.exc_info[0] is KeyError


class _RefusingTransport(MemoryTransport):
    """Refuses the wakeups of chosen runs one by one, as a provider refuses entries."""

    def __init__(self, queues: Sequence[Any]) -> None:
        super().__init__(queues)
        self.refused_runs: set[str] = set()

    async def publish_wakeups(self, attempts: Sequence[WakeupAttempt]) -> list[PublishOutcome]:
        good = [a for a in attempts if a.message.run_id not in self.refused_runs]
        published = iter(await super().publish_wakeups(good))
        refusal = WakeupFailed(PublishFailure("transport_publish_failed", "refused", False))
        return [
            refusal if a.message.run_id in self.refused_runs else next(published) for a in attempts
        ]


async def test_one_refused_wakeup_among_good_ones_fails_alone_in_the_outbox(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()

    @task("notify")
    async def notify(payload: Any, ctx: Context) -> None:
        return None

    transport = _RefusingTransport([MAIN, OTHER])
    rl, _ = await make_transport_runtime(
        [notify], clock=clock, transport=transport, dispatch="deferred"
    )
    runs = await rl.trigger_many(notify, [{"n": i} for i in range(7)])
    transport.refused_runs = {runs[3].id}
    report = await rl.tick()
    assert (report.outbox_published, report.outbox_failed) == (6, 1)
    assert report.failures == {}
    published = [a.message.run_id for a in transport.published]
    assert sorted(published) == sorted(r.id for i, r in enumerate(runs) if i != 3)
    clock.advance("10m")
    transport.refused_runs = set()
    again = await rl.tick()
    assert (again.outbox_published, again.outbox_failed) == (1, 0)
    assert transport.published[-1].message.run_id == runs[3].id


__all__ = [name for name in dir() if name.startswith("test_")] + [
    "make_runtime",
    "make_transport_runtime",
]
