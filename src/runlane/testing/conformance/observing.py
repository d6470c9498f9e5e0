"""Observers, failure tracebacks and attempt log lines: the same on every storage driver.

Use it like the storage suite (``from runlane.testing.conformance.observing import *``)
with the ``lane_factory`` and ``environment`` fixtures.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import pytest

from runlane import (
    Attempt,
    AttemptOutcome,
    Context,
    ManualClock,
    Observer,
    Release,
    RetryPolicy,
    Run,
    RunStatus,
    TickReport,
    WorkerMode,
    task,
)
from runlane.ports.storage import LeaseRequest, QueuePolicy
from runlane.ports.transport import DeliveryMessage
from runlane.testing import MAX_TRACEBACK_CHARS
from runlane.testing.conformance.storage.support import Factory, make_runtime

#: Set by the recording observer around each attempt; tasks read it.
_AROUND: contextvars.ContextVar[str | None] = contextvars.ContextVar("around", default=None)


class Recorder(Observer):
    """Records every hook call in order."""

    def __init__(self, carrier: Mapping[str, str] | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.settles: list[Attempt] = []
        self.carrier = carrier

    @contextlib.contextmanager
    def producing(self, task_id: str, queue: str, count: int) -> Iterator[Mapping[str, str] | None]:
        self.calls.append(("producing", (task_id, queue, count)))
        yield self.carrier

    def triggered(self, runs: Sequence[Run]) -> None:
        self.calls.append(("triggered", [run.id for run in runs]))

    def started(self, attempt: Attempt) -> None:
        self.calls.append(("started", attempt.run.id))

    @contextlib.asynccontextmanager
    async def attempt(self, attempt: Attempt) -> AsyncIterator[None]:
        self.calls.append(("attempt.enter", attempt.run.id))
        assert attempt.run.status is RunStatus.RUNNING and attempt.run.lease is not None
        token = _AROUND.set(f"around {attempt.run.id}")
        try:
            yield
        finally:
            _AROUND.reset(token)
            self.calls.append(("attempt.exit", attempt.outcome))

    def settled(self, attempt: Attempt) -> None:
        self.calls.append(("settled", attempt.outcome))
        self.settles.append(attempt)

    def lease_expired(self, run: Run) -> None:
        self.calls.append(("lease_expired", run.id))

    def ticked(self, report: TickReport) -> None:
        self.calls.append(("ticked", report.leases_recovered))

    def slots(self, busy: int, total: int) -> None:
        self.calls.append(("slots", (busy, total)))


class BrokenOnExit(Observer):
    """Enters fine, then raises when its contexts are left."""

    @contextlib.contextmanager
    def producing(self, task_id: str, queue: str, count: int) -> Iterator[None]:
        yield None
        raise RuntimeError("producing broke on exit")

    @contextlib.asynccontextmanager
    async def attempt(self, attempt: Attempt) -> AsyncIterator[None]:
        yield
        raise RuntimeError("attempt broke on exit")


class Broken(Observer):
    """Raises from every hook."""

    def producing(self, task_id: str, queue: str, count: int) -> Any:
        raise RuntimeError("producing broke")

    def triggered(self, runs: Sequence[Run]) -> None:
        raise RuntimeError("triggered broke")

    def started(self, attempt: Attempt) -> None:
        raise RuntimeError("started broke")

    def attempt(self, attempt: Attempt) -> Any:
        raise RuntimeError("attempt broke")

    def settled(self, attempt: Attempt) -> None:
        raise RuntimeError("settled broke")


@task("observed.echo")
async def echo(payload: Any, ctx: Context) -> Any:
    return {"payload": payload, "around": _AROUND.get()}


@task("observed.sync_echo")
def sync_echo(payload: Any, ctx: Context) -> Any:
    return {"around": _AROUND.get()}


def _innermost() -> None:
    raise ValueError("the innermost frame failed")


@task("observed.fails", retry=RetryPolicy(max_attempts=2, initial_delay="10s", max_delay="10s"))
async def fails(payload: Any, ctx: Context) -> None:
    _innermost()


def _recursing(depth: int) -> None:
    if depth == 0:
        raise KeyError("bottom of a deep stack")
    _also_recursing(depth - 1)


def _also_recursing(depth: int) -> None:
    # Mutual recursion: Python folds identical consecutive frames, not alternating ones.
    _recursing(depth)


@task("observed.deep", retry=RetryPolicy(max_attempts=1))
async def deep(payload: Any, ctx: Context) -> None:
    _recursing(150)


@task("observed.releases")
async def releases(payload: Any, ctx: Context) -> Release:
    return ctx.release("5s", reason="rate limited")


async def test_an_observer_sees_a_trigger_and_the_attempt_around_the_handler(
    make_runtime: Factory,
) -> None:
    recorder = Recorder()
    rl = await make_runtime([echo], observers=[recorder])
    run = await rl.trigger(echo, {"n": 1})
    settled = await rl.execute_next()
    assert settled is not None and settled.status is RunStatus.SUCCEEDED
    # The attempt context is current while the handler runs.
    assert settled.result == {"payload": {"n": 1}, "around": f"around {run.id}"}
    assert recorder.calls == [
        ("producing", ("observed.echo", "main", 1)),
        ("triggered", [run.id]),
        ("started", run.id),
        ("attempt.enter", run.id),
        ("settled", AttemptOutcome.SUCCEEDED),
        ("attempt.exit", AttemptOutcome.SUCCEEDED),
    ]
    (attempt,) = recorder.settles
    assert attempt.run.status is RunStatus.RUNNING and attempt.run.attempt == 1
    # The settled run is built when first read, the same as the one written.
    assert attempt.settled == settled
    assert attempt.duration >= 0 and attempt.error is None and attempt.failure is None


async def test_sync_tasks_run_inside_the_callers_context_variables(make_runtime: Factory) -> None:
    rl = await make_runtime([sync_echo], observers=[Recorder()])
    run = await rl.trigger(sync_echo, None)
    settled = await rl.execute_next()
    assert settled is not None and settled.result == {"around": f"around {run.id}"}


async def test_sync_tasks_see_the_apps_own_context_variables_with_run_now(
    make_runtime: Factory,
) -> None:
    rl = await make_runtime([sync_echo])
    token = _AROUND.set("set by the app")
    try:
        done = await rl.run_now(sync_echo, None)
    finally:
        _AROUND.reset(token)
    assert done.result == {"around": "set by the app"}


async def test_every_entry_point_is_observed(make_runtime: Factory) -> None:
    recorder = Recorder()
    rl = await make_runtime([echo], observers=[recorder])
    # run_now
    now_run = await rl.run_now(echo, "now")
    assert now_run.result["around"] == f"around {now_run.id}"
    # a worker
    worker_run = await rl.trigger(echo, "worker")
    await rl.worker(concurrency=2, mode=WorkerMode.DRAIN, handle_signals=False).run()
    # execute_delivery
    delivered = await rl.trigger(echo, "delivery")
    result = await rl.execute_delivery(DeliveryMessage(rl.environment, delivered.id, "main"))
    assert result.executed and result.run is not None
    assert result.run.result["around"] == f"around {delivered.id}"
    entered = [value for name, value in recorder.calls if name == "attempt.enter"]
    assert entered == [now_run.id, worker_run.id, delivered.id]
    assert [value for name, value in recorder.calls if name == "started"] == entered
    assert [a.outcome for a in recorder.settles] == [AttemptOutcome.SUCCEEDED] * 3
    # Every entry point gives observers the run as stored after the attempt, the
    # worker's too (which builds no settled run for itself).
    for attempt in recorder.settles:
        assert attempt.settled is not None
        assert attempt.settled == await rl.runs.get(attempt.run.id)
    slots = [value for name, value in recorder.calls if name == "slots"]
    assert slots[0] == (0, 2) and (1, 2) in slots and slots[-1] == (0, 2)


async def test_a_producing_carrier_is_stored_only_where_the_caller_gave_none(
    make_runtime: Factory,
) -> None:
    rl = await make_runtime([echo], observers=[Recorder({"traceparent": "from-observer"})])
    plain = await rl.trigger(echo, 1)
    given = await rl.trigger(echo, 2, trace_carrier={"traceparent": "from-caller"})
    many = await rl.trigger_many(echo, [3, 4])
    assert (await rl.runs.get(plain.id)).trace_carrier == {"traceparent": "from-observer"}
    assert (await rl.runs.get(given.id)).trace_carrier == {"traceparent": "from-caller"}
    for run in many:
        assert (await rl.runs.get(run.id)).trace_carrier == {"traceparent": "from-observer"}


async def test_an_observer_that_raises_is_logged_once_per_hook_and_changes_nothing(
    make_runtime: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    rl = await make_runtime([echo], observers=[Broken()])
    rl.add_observer(recorder)
    with caplog.at_level(logging.ERROR, logger="runlane.observers"):
        for n in range(3):
            await rl.trigger(echo, n)
            settled = await rl.execute_next()
            assert settled is not None and settled.status is RunStatus.SUCCEEDED
    hooks = sorted(record.getMessage().split(" raised in ")[1] for record in caplog.records)
    assert hooks == [
        "attempt (ignored; logged once)",
        "producing (ignored; logged once)",
        "settled (ignored; logged once)",
        "started (ignored; logged once)",
        "triggered (ignored; logged once)",
    ]
    # The healthy observer still saw everything.
    assert [a.outcome for a in recorder.settles] == [AttemptOutcome.SUCCEEDED] * 3


class Nested(Observer):
    """Records entering and leaving its attempt context under its own name."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    @contextlib.asynccontextmanager
    async def attempt(self, attempt: Attempt) -> AsyncIterator[None]:
        self.calls.append(f"enter {self.name}")
        yield
        self.calls.append(f"exit {self.name}")

    def settled(self, attempt: Attempt) -> None:
        self.calls.append(f"settled {self.name}")


async def test_attempt_contexts_are_left_in_reverse_order_of_entry(
    make_runtime: Factory,
) -> None:
    calls: list[str] = []
    observers = [Nested("a", calls), Broken(), Nested("b", calls), Nested("c", calls)]
    rl = await make_runtime([echo], observers=observers)
    await rl.trigger(echo, None)
    await rl.execute_next()
    assert calls == [
        "enter a",
        "enter b",
        "enter c",
        "settled a",
        "settled b",
        "settled c",
        "exit c",
        "exit b",
        "exit a",
    ]


async def test_an_observer_that_raises_when_left_changes_nothing_either(
    make_runtime: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    rl = await make_runtime([echo], observers=[BrokenOnExit()])
    with caplog.at_level(logging.ERROR, logger="runlane.observers"):
        run = await rl.trigger(echo, 1)
        many = await rl.trigger_many(echo, [2, 3])
        done = await rl.run_now(echo, 4)
        settled = await rl.execute_next()
    assert settled is not None and settled.id == run.id
    assert settled.status is RunStatus.SUCCEEDED and done.status is RunStatus.SUCCEEDED
    assert len(many) == 2
    assert len(caplog.records) == 2  # once per hook


async def test_a_failed_attempt_keeps_its_traceback_in_the_failure_and_the_event(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    recorder = Recorder()
    rl = await make_runtime([fails], clock=clock, observers=[recorder])
    run = await rl.trigger(fails, None)
    first = await rl.execute_next()
    assert first is not None and first.status is RunStatus.RETRYING
    clock.advance("10s")
    second = await rl.execute_next()
    assert second is not None and second.status is RunStatus.FAILED
    tokens = [a.run.lease.token for a in recorder.settles if a.run.lease is not None]
    assert len(tokens) == 2
    for failed in (first, second):
        assert failed.failure is not None
        # Lease tokens never reach what is stored and shown.
        assert not any(token in repr(failed.failure.to_json()) for token in tokens)
        text = failed.failure.meta["traceback"]
        assert text.startswith("Traceback (most recent call last):")
        assert "in _innermost" in text
        assert text.rstrip().endswith("ValueError: the innermost frame failed")
        assert failed.lease is None
    events = {event.type.value: event for event in await rl.runs.events(run.id)}
    for name in ("run.retry_scheduled", "run.failed"):
        assert "in _innermost" in events[name].data["failure"]["meta"]["traceback"]
    # What observers saw: the exception itself, the outcome and the retry delay.
    retried, failed_attempt = recorder.settles
    assert retried.outcome is AttemptOutcome.RETRIED and retried.delay_seconds == pytest.approx(
        10, 0.5
    )
    assert isinstance(retried.error, ValueError)
    assert failed_attempt.outcome is AttemptOutcome.FAILED and failed_attempt.delay_seconds is None


async def test_a_long_traceback_keeps_its_innermost_frames_within_the_cap(
    make_runtime: Factory,
) -> None:
    rl = await make_runtime([deep])
    await rl.trigger(deep, None)
    failed = await rl.execute_next()
    assert failed is not None and failed.failure is not None
    text = failed.failure.meta["traceback"]
    assert len(text) <= MAX_TRACEBACK_CHARS + 40
    assert "(traceback truncated)" in text and "in _recursing" in text
    assert text.rstrip().endswith("KeyError: 'bottom of a deep stack'")


async def test_one_log_line_per_attempt_outcome_carries_the_run_fields(
    make_runtime: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    rl = await make_runtime([fails, releases, echo], clock=clock)
    with caplog.at_level(logging.DEBUG, logger="runlane.execution"):
        ok = await rl.run_now(echo, None)
        released = await rl.run_now(releases, None)
        failing = await rl.run_now(fails, None)
        await rl.runs.cancel(released.id)
        clock.advance("10s")
        await rl.execute_next()
    by_event: dict[str, list[logging.LogRecord]] = {}
    for record in caplog.records:
        by_event.setdefault(getattr(record, "event", "?"), []).append(record)
    (succeeded,) = by_event["run.succeeded"]
    assert succeeded.levelno == logging.DEBUG
    assert (succeeded.run_id, succeeded.task_id, succeeded.queue, succeeded.attempt) == (  # type: ignore[attr-defined]
        ok.id,
        "observed.echo",
        "main",
        1,
    )
    assert succeeded.outcome == "succeeded" and succeeded.duration >= 0  # type: ignore[attr-defined]
    (release,) = by_event["run.released"]
    assert release.run_id == released.id and release.delay_seconds == 5  # type: ignore[attr-defined]
    assert "rate limited" in release.getMessage()
    (retry,) = by_event["run.retry_scheduled"]
    assert retry.levelno == logging.INFO and retry.run_id == failing.id  # type: ignore[attr-defined]
    assert retry.error_type == "ValueError" and retry.error_code == "task_failed"  # type: ignore[attr-defined]
    assert retry.delay_seconds == pytest.approx(10, 0.5)  # type: ignore[attr-defined]
    (final,) = by_event["run.failed"]
    assert final.levelno == logging.WARNING and final.attempt == 2  # type: ignore[attr-defined]
    assert final.exc_info is not None and final.exc_info[0] is ValueError
    assert len(by_event["run.started"]) == 4


async def test_tick_reports_expired_leases_and_passes_to_observers(make_runtime: Factory) -> None:
    clock = ManualClock()
    recorder = Recorder()
    rl = await make_runtime([echo], clock=clock, observers=[recorder])
    run = await rl.trigger(echo, None)
    lease = LeaseRequest("ghost-worker", clock.now() + timedelta(seconds=30))
    await rl.storage.claim_due_runs(rl.environment, [QueuePolicy("main")], 1, lease, clock.now())
    clock.advance("31s")
    await rl.tick()
    assert ("lease_expired", run.id) in recorder.calls
    assert recorder.calls[-1] == ("ticked", 1)


def test_observers_must_subclass_observer() -> None:
    from runlane import ErrorCode, Runlane, RunlaneError, queue, sqlite_lane

    with pytest.raises(RunlaneError) as raised:
        Runlane(
            lane=sqlite_lane(":memory:"),
            queues=[queue("main", default=True)],
            tasks=[echo],
            observers=[object()],  # type: ignore[list-item]
        )
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert "runlane.Observer" in raised.value.message


__all__ = ["make_runtime", *(name for name in dir() if name.startswith("test_"))]
