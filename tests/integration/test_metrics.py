"""Prometheus process metrics: an observer whose scrape moves as the runtime works."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    Release,
    RetryPolicy,
    Runlane,
    RunlaneError,
    WorkerMode,
    __version__,
    queue,
    sqlite_lane,
    task,
)
from runlane.metrics import DURATION_BUCKETS, prometheus_metrics
from runlane.operator import active_run_count
from runlane.ports.storage import LeaseRequest, QueuePolicy

MAIN = queue("main", default=True)


@task("m.ok")
async def ok(payload: Any, ctx: Context) -> None:
    return None


@task("m.fails", retry=RetryPolicy(max_attempts=2, initial_delay="1ms", max_delay="1ms"))
async def flaky(payload: Any, ctx: Context) -> None:
    raise RuntimeError("no")


@task("m.releases")
async def releases(payload: Any, ctx: Context) -> Release | None:
    return ctx.release("1ms", reason="later") if ctx.attempt == 1 else None


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    """Every sample of a scrape, parsed by prometheus_client's own parser."""
    text = generate_latest(registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[Runlane, CollectorRegistry]]:
    registry = CollectorRegistry()
    rl = Runlane(
        lane=sqlite_lane(tmp_path / "m.db"),
        queues=[MAIN],
        tasks=[ok, flaky, releases],
        environment="metrics-test",
        observers=[prometheus_metrics(registry)],
    )
    await rl.migrate()
    async with rl:
        yield rl, registry


async def test_counters_and_histograms_move_after_a_drain(
    runtime: tuple[Runlane, CollectorRegistry],
) -> None:
    rl, registry = runtime
    before = scrape(registry)
    assert value(before, "runlane_info", version=__version__, environment="metrics-test") == 1
    assert value(before, "runlane_attempts_started_total", queue="main", task="m.ok") == 0

    await rl.trigger_many(ok, [1, 2, 3])
    await rl.trigger(flaky, None)
    await rl.trigger(releases, None)
    # Retries and releases come due a moment later: drain until nothing is left.
    while active_run_count(await rl.queue_stats()):
        await rl.worker(concurrency=4, mode=WorkerMode.DRAIN, handle_signals=False).run()

    after = scrape(registry)
    main_ok = {"queue": "main", "task": "m.ok"}
    main_flaky = {"queue": "main", "task": "m.fails"}
    main_rel = {"queue": "main", "task": "m.releases"}
    assert value(after, "runlane_runs_triggered_total", **main_ok) == 3
    assert value(after, "runlane_runs_triggered_total", **main_flaky) == 1
    assert value(after, "runlane_attempts_started_total", **main_ok) == 3
    assert value(after, "runlane_runs_succeeded_total", **main_ok) == 3
    # Two attempts of the flaky run: one retry, then the dead letter.
    assert value(after, "runlane_attempts_started_total", **main_flaky) == 2
    assert value(after, "runlane_runs_retried_total", **main_flaky) == 1
    assert value(after, "runlane_runs_failed_total", **main_flaky) == 1
    assert value(after, "runlane_runs_released_total", **main_rel) == 1
    assert value(after, "runlane_runs_succeeded_total", **main_rel) == 1
    assert (
        value(after, "runlane_attempt_duration_seconds_count", outcome="succeeded", **main_ok) == 3
    )
    assert value(after, "runlane_attempt_duration_seconds_count", outcome="retried", **main_flaky)
    assert value(after, "runlane_start_latency_seconds_count", **main_ok) == 3
    # The histogram uses background-work buckets, up to an hour.

    assert (
        value(
            after,
            "runlane_attempt_duration_seconds_bucket",
            le="3600.0",
            outcome="succeeded",
            **main_ok,
        )
        == 3
    )
    assert value(after, "runlane_worker_slots") == 4
    assert value(after, "runlane_worker_slots_busy") == 0


async def test_tick_counts_lease_expirations_and_duty_actions(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    clock = ManualClock()
    rl = Runlane(
        lane=sqlite_lane(tmp_path / "t.db"),
        queues=[MAIN],
        tasks=[ok],
        clock=clock,
        observers=[prometheus_metrics(registry)],
    )
    await rl.migrate()
    async with rl:
        await rl.trigger(ok, None)
        lease = LeaseRequest("ghost", clock.now() + timedelta(seconds=30))
        await rl.storage.claim_due_runs(
            rl.environment, [QueuePolicy("main")], 1, lease, clock.now()
        )
        clock.advance("31s")
        await rl.tick()
    samples = scrape(registry)
    assert value(samples, "runlane_lease_expirations_total", queue="main") == 1
    assert value(samples, "runlane_tick_actions_total", duty="leases_recovered") == 1
    assert value(samples, "runlane_tick_actions_total", duty="runs_pruned") == 0


def test_observers_on_one_registry_share_their_collectors() -> None:
    registry = CollectorRegistry()
    first = prometheus_metrics(registry)
    second = prometheus_metrics(registry, buckets=DURATION_BUCKETS)
    assert first.c is second.c
    with pytest.raises(RunlaneError) as raised:
        prometheus_metrics(registry, buckets=(1.0, 2.0))
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert "buckets" in raised.value.message


def test_histograms_count_like_the_client_and_share_series_by_queue_and_task(
    tmp_path: Path,
) -> None:
    """Series are plain numbers read at scrape: a bound is inclusive (as
    prometheus_client's own histogram), buckets are cumulative, +Inf is the count."""
    from runlane import Attempt, AttemptOutcome
    from runlane.types.runs import Lease, Run, RunStatus

    registry = CollectorRegistry()
    metrics = prometheus_metrics(registry, buckets=(0.5, 1.0))
    now = ManualClock().now()
    run = Run(
        id="r1",
        environment="e",
        task_id="m.ok",
        queue="main",
        status=RunStatus.RUNNING,
        payload=None,
        attempt=1,
        failure_count=0,
        run_at=now,
        created_at=now,
        updated_at=now + timedelta(seconds=1),
        event_sequence=2,
        lease=Lease("w", "t", now),
    )
    for duration in (0.5, 0.75, 2.0):
        attempt = Attempt(run, "w", duration=duration, outcome=AttemptOutcome.SUCCEEDED)
        metrics.started(attempt)
        metrics.settled(attempt)
    metrics.triggered([run, run])
    samples = scrape(registry)
    labels = {"queue": "main", "task": "m.ok"}
    ok = {**labels, "outcome": "succeeded"}
    assert value(samples, "runlane_runs_triggered_total", **labels) == 2
    assert value(samples, "runlane_attempts_started_total", **labels) == 3
    assert value(samples, "runlane_runs_succeeded_total", **labels) == 3
    assert value(samples, "runlane_runs_failed_total", **labels) == 0  # zeros are series too
    assert value(samples, "runlane_attempt_duration_seconds_bucket", le="0.5", **ok) == 1
    assert value(samples, "runlane_attempt_duration_seconds_bucket", le="1.0", **ok) == 2
    assert value(samples, "runlane_attempt_duration_seconds_bucket", le="+Inf", **ok) == 3
    assert value(samples, "runlane_attempt_duration_seconds_count", **ok) == 3
    assert value(samples, "runlane_attempt_duration_seconds_sum", **ok) == 3.25
    # The one-second start latency sits on the 1.0 bound.
    assert value(samples, "runlane_start_latency_seconds_bucket", le="0.5", **labels) == 0
    assert value(samples, "runlane_start_latency_seconds_bucket", le="1.0", **labels) == 3
    assert value(samples, "runlane_start_latency_seconds_sum", **labels) == 3.0
    # A second observer on the registry adds to the same series.
    prometheus_metrics(registry, buckets=(0.5, 1.0)).triggered([run])
    assert value(scrape(registry), "runlane_runs_triggered_total", **labels) == 3
