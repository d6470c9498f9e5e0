"""Process metrics: an observer that feeds ``prometheus_client`` collectors."""

from __future__ import annotations

import dataclasses
import weakref
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from runlane import Attempt, AttemptOutcome, Observer, Run, TickReport, __version__
from runlane.types.errors import ErrorCode, RunlaneError

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


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError as error:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            "Prometheus metrics need prometheus-client: pip install 'runlane[metrics]'.",
        ) from error
    return prometheus_client


#: The outcome counters: (metric name without _total, help), by outcome.
_OUTCOME_COUNTERS: dict[AttemptOutcome, tuple[str, str]] = {
    AttemptOutcome.SUCCEEDED: ("runlane_runs_succeeded", "Attempts that ended the run SUCCEEDED."),
    AttemptOutcome.FAILED: (
        "runlane_runs_failed",
        "Runs that ended FAILED (no retry left or not retryable).",
    ),
    AttemptOutcome.RETRIED: ("runlane_runs_retried", "Failed attempts that scheduled a retry."),
    AttemptOutcome.RELEASED: ("runlane_runs_released", "Attempts that returned ctx.release(...)."),
    AttemptOutcome.CANCELLED: (
        "runlane_runs_cancelled",
        "Runs that ended CANCELLED in this process.",
    ),
    AttemptOutcome.DEAD_LETTERED: (
        "runlane_runs_dead_lettered",
        "Subscription deliveries that ended DEAD_LETTERED.",
    ),
}


class _Histogram:
    """Observations per bucket (not cumulative: one increment per observation) and
    their sum; the cumulative counts are computed at scrape time."""

    __slots__ = ("counts", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0] * (size + 1)  # the last one is +Inf
        self.sum = 0.0

    def family_sample(self, bounds: Sequence[str]) -> tuple[list[tuple[str, float]], float]:
        counts, total = list(self.counts), self.sum  # a copy: the loop thread writes on
        cumulative, buckets = 0, []
        for bound, count in zip(bounds, counts, strict=True):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        return buckets, total


class _Series:
    """Everything counted for one (queue, task): plain numbers, so an attempt costs a
    few additions instead of a lock and a method call per sample."""

    __slots__ = ("durations", "outcomes", "start_latency", "started", "triggered")

    def __init__(self, buckets: int) -> None:
        self.triggered = 0
        self.started = 0
        self.start_latency = _Histogram(buckets)
        self.outcomes = dict.fromkeys(_OUTCOME_COUNTERS, 0)
        self.durations = {outcome: _Histogram(buckets) for outcome in AttemptOutcome}


class _Collectors:
    """The metrics on one registry: a custom collector read at scrape time for the
    per-attempt series, client collectors for the rare ones."""

    def __init__(self, client: Any, registry: CollectorRegistry, buckets: tuple[float, ...]):
        from prometheus_client import metrics_core
        from prometheus_client.utils import floatToGoString

        self._core: Any = metrics_core
        self.buckets = buckets
        bound_text = cast("Callable[[float], str]", floatToGoString)  # as the client writes it
        self._bounds = [bound_text(bound) for bound in buckets] + ["+Inf"]
        #: By (queue, task); only the event loop's thread adds to it.
        self.series: dict[tuple[str, str], _Series] = {}
        self.slots_total = 0
        self.slots_busy = 0
        self.lease_expirations = client.Counter(
            "runlane_lease_expirations",
            "Leases recovered by tick in this process.",
            ("queue",),
            registry=registry,
        )
        self.tick_actions = client.Counter(
            "runlane_tick_actions", "What maintenance did, by duty.", ("duty",), registry=registry
        )
        self.info = client.Gauge(
            "runlane_info", "Build info.", ("version", "environment"), registry=registry
        )
        registry.register(self)

    def of(self, queue: str, task_id: str) -> _Series:
        """The series of (queue, task), created on first use."""
        series = self.series.get((queue, task_id))
        if series is None:
            series = self.series[(queue, task_id)] = _Series(len(self.buckets))
        return series

    def describe(self) -> list[Any]:
        """The families without samples (the registry checks names with this)."""
        return self._families({})

    def collect(self) -> list[Any]:
        """Every per-attempt family, read now (called by the registry on scrape)."""
        return self._families(self.series.copy())  # copy() is atomic: no lock needed

    def _families(self, series: dict[tuple[str, str], _Series]) -> list[Any]:
        core = self._core
        qt = ["queue", "task"]
        triggered = core.CounterMetricFamily(
            "runlane_runs_triggered", "Runs created by this process.", labels=qt
        )
        started = core.CounterMetricFamily("runlane_attempts_started", "Attempts begun.", labels=qt)
        outcomes = {
            outcome: core.CounterMetricFamily(name, doc, labels=qt)
            for outcome, (name, doc) in _OUTCOME_COUNTERS.items()
        }
        duration = core.HistogramMetricFamily(
            "runlane_attempt_duration_seconds",
            "Handler wall time per attempt.",
            labels=[*qt, "outcome"],
        )
        latency = core.HistogramMetricFamily(
            "runlane_start_latency_seconds",
            "From when the run became due to this attempt's lease.",
            labels=qt,
        )
        bounds = self._bounds
        for (queue, task_id), one in series.items():
            labels = [queue, task_id]
            triggered.add_metric(labels, one.triggered)
            started.add_metric(labels, one.started)
            for outcome, family in outcomes.items():
                family.add_metric(labels, one.outcomes[outcome])
            for outcome, histogram in one.durations.items():
                buckets, total = histogram.family_sample(bounds)
                duration.add_metric([*labels, outcome.value], buckets, total)
            buckets, total = one.start_latency.family_sample(bounds)
            latency.add_metric(labels, buckets, total)
        slots = core.GaugeMetricFamily(
            "runlane_worker_slots", "Local concurrency of the worker.", value=self.slots_total
        )
        busy = core.GaugeMetricFamily(
            "runlane_worker_slots_busy", "Slots executing an attempt now.", value=self.slots_busy
        )
        return [triggered, started, *outcomes.values(), duration, latency, slots, busy]


_SHARED: weakref.WeakKeyDictionary[Any, dict[tuple[float, ...], _Collectors]] = (
    weakref.WeakKeyDictionary()
)


class PrometheusMetrics(Observer):
    """The §8.2 process metrics; build it with :func:`prometheus_metrics`.

    Labels are only ``queue``, ``task``, ``outcome`` and ``duty``: bounded by the
    registry, never run ids or concurrency keys. The per-attempt series are plain
    numbers this observer adds to on the event loop and a collector reads at scrape
    time: an attempt costs a few additions, not a locked client call per sample.
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
        self._buckets = key
        #: The series of the last (queue, task) seen: attempts come in runs of one task.
        self._last: tuple[str, str, _Series] | None = None
        self._ticks = [f.name for f in dataclasses.fields(TickReport) if f.name != "failures"]

    def attached(self, runtime: ObservedRuntime) -> None:
        self.c.info.labels(__version__, runtime.environment).set(1)

    def triggered(self, runs: Sequence[Run]) -> None:
        of = self.c.of
        for run in runs:
            of(run.queue, run.task_id).triggered += 1

    def _series(self, run: Run) -> _Series:
        last = self._last
        if last is not None and last[1] == run.task_id and last[0] == run.queue:
            return last[2]
        series = self.c.of(run.queue, run.task_id)
        self._last = (run.queue, run.task_id, series)
        return series

    def started(self, attempt: Attempt) -> None:
        run = attempt.run
        series = self._series(run)
        series.started += 1
        latency = (run.updated_at - run.run_at).total_seconds()
        if latency < 0.0:
            latency = 0.0
        histogram = series.start_latency
        histogram.counts[bisect_left(self._buckets, latency)] += 1
        histogram.sum += latency

    def settled(self, attempt: Attempt) -> None:
        outcome = attempt.outcome
        assert outcome is not None
        series = self._series(attempt.run)
        if outcome in series.outcomes:
            series.outcomes[outcome] += 1
        duration = attempt.duration
        histogram = series.durations[outcome]
        histogram.counts[bisect_left(self._buckets, duration)] += 1
        histogram.sum += duration

    def lease_expired(self, run: Run) -> None:
        self.c.lease_expirations.labels(run.queue).inc()

    def ticked(self, report: TickReport) -> None:
        for name in self._ticks:
            value = getattr(report, name)
            if value:
                self.c.tick_actions.labels(name).inc(value)

    def slots(self, busy: int, total: int) -> None:
        self.c.slots_busy = busy
        self.c.slots_total = total


def prometheus_metrics(
    registry: CollectorRegistry | None = None, buckets: Sequence[float] = DURATION_BUCKETS
) -> PrometheusMetrics:
    """An observer exporting Runlane's process metrics on ``registry`` (default: the
    global ``prometheus_client.REGISTRY``); ``buckets`` for both duration histograms.

    Raises ``RunlaneError(CONFIGURATION_INVALID)`` without ``prometheus-client``.
    """
    return PrometheusMetrics(registry, buckets)
