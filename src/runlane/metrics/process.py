"""Process metrics: an observer that feeds ``prometheus_client`` collectors."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from runlane import Attempt, AttemptOutcome, Observer, Run, TickReport, __version__
from runlane.core.errors import ErrorCode, RunlaneError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from runlane.core.observing import ObservedRuntime

#: Background work is slower than HTTP: the client's default buckets stop at 10 s.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
)

_COUNTER_BY_OUTCOME = {
    AttemptOutcome.SUCCEEDED: "succeeded",
    AttemptOutcome.FAILED: "failed",
    AttemptOutcome.RETRIED: "retried",
    AttemptOutcome.RELEASED: "released",
    AttemptOutcome.CANCELLED: "cancelled",
}


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError as error:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            "Prometheus metrics need prometheus-client: pip install 'runlane[metrics]'.",
        ) from error
    return prometheus_client


class _Collectors:
    """The collectors on one registry."""

    def __init__(self, client: Any, registry: CollectorRegistry, buckets: tuple[float, ...]):
        qt = ("queue", "task")

        def counter(name: str, doc: str, labels: Sequence[str] = qt) -> Any:
            return client.Counter(name, doc, labels, registry=registry)

        self.triggered_total = counter("runlane_runs_triggered", "Runs created by this process.")
        self.attempts_started = counter("runlane_attempts_started", "Attempts begun.")
        self.outcomes = {
            AttemptOutcome.SUCCEEDED: counter(
                "runlane_runs_succeeded", "Attempts that ended the run SUCCEEDED."
            ),
            AttemptOutcome.FAILED: counter(
                "runlane_runs_failed", "Runs that ended FAILED (no retry left or not retryable)."
            ),
            AttemptOutcome.RETRIED: counter(
                "runlane_runs_retried", "Failed attempts that scheduled a retry."
            ),
            AttemptOutcome.RELEASED: counter(
                "runlane_runs_released", "Attempts that returned ctx.release(...)."
            ),
            AttemptOutcome.CANCELLED: counter(
                "runlane_runs_cancelled", "Runs that ended CANCELLED in this process."
            ),
        }
        self.duration = client.Histogram(
            "runlane_attempt_duration_seconds",
            "Handler wall time per attempt.",
            ("queue", "task", "outcome"),
            buckets=buckets,
            registry=registry,
        )
        self.start_latency = client.Histogram(
            "runlane_start_latency_seconds",
            "From when the run became due to this attempt's lease.",
            qt,
            buckets=buckets,
            registry=registry,
        )
        self.lease_expirations = counter(
            "runlane_lease_expirations", "Leases recovered by tick in this process.", ("queue",)
        )
        self.tick_actions = counter(
            "runlane_tick_actions", "What maintenance did, by duty.", ("duty",)
        )
        self.slots_total = client.Gauge(
            "runlane_worker_slots", "Local concurrency of the worker.", registry=registry
        )
        self.slots_busy = client.Gauge(
            "runlane_worker_slots_busy", "Slots executing an attempt now.", registry=registry
        )
        self.info = client.Gauge(
            "runlane_info", "Build info.", ("version", "environment"), registry=registry
        )


class _Children:
    """The labelled series of one (queue, task)."""

    __slots__ = ("by_outcome", "start_latency", "started")

    def __init__(self, c: _Collectors, queue: str, task_id: str) -> None:
        self.started = c.attempts_started.labels(queue, task_id)
        self.start_latency = c.start_latency.labels(queue, task_id)
        self.by_outcome: dict[AttemptOutcome, tuple[Any, Any]] = {
            outcome: (
                c.outcomes[outcome].labels(queue, task_id) if outcome in c.outcomes else None,
                c.duration.labels(queue, task_id, outcome.value),
            )
            for outcome in AttemptOutcome
        }


_SHARED: weakref.WeakKeyDictionary[Any, dict[tuple[float, ...], _Collectors]] = (
    weakref.WeakKeyDictionary()
)


class PrometheusMetrics(Observer):
    """The §8.2 process metrics; build it with :func:`prometheus_metrics`.

    Labels are only ``queue``, ``task``, ``outcome`` and ``duty``: bounded by the
    registry, never run ids or concurrency keys.
    """

    def __init__(self, registry: CollectorRegistry | None, buckets: Sequence[float]) -> None:
        client = _client()
        registry = registry if registry is not None else client.REGISTRY
        key = tuple(buckets)
        shared = _SHARED.setdefault(registry, {})
        # Collectors are process-wide: a second observer on one registry shares them
        # (prometheus_client refuses to register a name twice).
        if key not in shared:
            if shared:
                raise RunlaneError(
                    ErrorCode.CONFIGURATION_INVALID,
                    "Runlane metrics are already registered on this registry with other "
                    "buckets; pass the same buckets or another registry.",
                )
            shared[key] = _Collectors(client, registry, key)
        self.c = shared[key]
        #: Labelled children by (queue, task): labels() takes a lock and builds a key on
        #: every call, and these are touched on every attempt.
        self._children: dict[tuple[str, str], _Children] = {}
        self._ticks = [f.name for f in dataclasses.fields(TickReport) if f.name != "failures"]

    def attached(self, runtime: ObservedRuntime) -> None:
        self.c.info.labels(__version__, runtime.environment).set(1)

    def triggered(self, runs: Sequence[Run]) -> None:
        counter = self.c.triggered_total
        if len(runs) == 1:
            counter.labels(runs[0].queue, runs[0].task_id).inc()
            return
        counts: dict[tuple[str, str], int] = {}
        for run in runs:
            key = (run.queue, run.task_id)
            counts[key] = counts.get(key, 0) + 1
        for (queue, task_id), count in counts.items():
            counter.labels(queue, task_id).inc(count)

    def _for(self, run: Run) -> _Children:
        key = (run.queue, run.task_id)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = _Children(self.c, *key)
        return children

    def attempt(self, attempt: Attempt) -> AbstractAsyncContextManager[None]:
        run = attempt.run
        children = self._for(run)
        children.started.inc()
        latency = (run.updated_at - run.run_at).total_seconds()
        children.start_latency.observe(latency if latency > 0 else 0.0)
        return _NOTHING

    def settled(self, attempt: Attempt) -> None:
        outcome = attempt.outcome
        assert outcome is not None
        counter, duration = self._for(attempt.run).by_outcome[outcome]
        if counter is not None:
            counter.inc()
        duration.observe(attempt.duration)

    def lease_expired(self, run: Run) -> None:
        self.c.lease_expirations.labels(run.queue).inc()

    def ticked(self, report: TickReport) -> None:
        for name in self._ticks:
            value = getattr(report, name)
            if value:
                self.c.tick_actions.labels(name).inc(value)

    def slots(self, busy: int, total: int) -> None:
        self.c.slots_busy.set(busy)
        self.c.slots_total.set(total)


class _Nothing:
    """A reusable async context manager that does nothing (cheaper than building one)."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NOTHING = _Nothing()


def prometheus_metrics(
    registry: CollectorRegistry | None = None, buckets: Sequence[float] = DURATION_BUCKETS
) -> PrometheusMetrics:
    """An observer exporting Runlane's process metrics on ``registry`` (default: the
    global ``prometheus_client.REGISTRY``); ``buckets`` for both duration histograms.

    Raises ``RunlaneError(CONFIGURATION_INVALID)`` without ``prometheus-client``.
    """
    return PrometheusMetrics(registry, buckets)
