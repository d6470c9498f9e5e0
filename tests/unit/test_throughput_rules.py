"""The throughput rules of ``runlane.model.throughput``: latency buckets and percentiles,
and chart points built from rollup rows (``runlane.core.throughput.build_series``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane.core.throughput import build_series
from runlane.model.throughput import (
    LATENCY_BOUNDS_MS,
    LATENCY_SERIES,
    latency_bucket,
    latency_index,
    latency_percentile,
)
from runlane.types.records import ThroughputRow

SINCE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _series(milliseconds: float) -> str:
    return LATENCY_SERIES[latency_index(timedelta(milliseconds=milliseconds))]


def test_a_latency_falls_in_the_first_bucket_whose_bound_it_does_not_pass() -> None:
    assert _series(0) == _series(-3) == _series(5) == "latency_00"
    assert _series(5.001) == "latency_01"
    assert _series(2_000) == "latency_08"
    assert _series(10**9) == f"latency_{len(LATENCY_BOUNDS_MS):02d}"
    assert latency_bucket("latency_08") == 8 and latency_bucket("succeeded") is None
    assert [latency_bucket(name) for name in LATENCY_SERIES] == list(range(len(LATENCY_SERIES)))


def test_percentiles_are_the_bound_of_the_bucket_where_the_share_is_reached() -> None:
    counts = [0] * (len(LATENCY_BOUNDS_MS) + 1)
    assert latency_percentile(counts, 0.5) is None
    counts[1], counts[4], counts[9] = 50, 45, 5
    assert latency_percentile(counts, 0.5) == 10
    assert latency_percentile(counts, 0.95) == 100
    assert latency_percentile(counts, 0.96) == 5_000
    counts[-1] = 1_000
    assert latency_percentile(counts, 0.95) == LATENCY_BOUNDS_MS[-1]


def test_series_points_cover_the_window_and_sum_into_the_total() -> None:
    rows = [
        ThroughputRow("main", SINCE, "succeeded", 3),
        ThroughputRow("main", SINCE, "latency_02", 3),
        ThroughputRow("main", SINCE + timedelta(minutes=2), "failed", 1),
        ThroughputRow("main", SINCE + timedelta(minutes=2), "latency_09", 1),
    ]
    series = build_series("main", "1h", SINCE, 3600, 60, rows)
    assert len(series.points) == 60 and series.points[1].started == 0
    first, third = series.points[0], series.points[2]
    assert (first.succeeded, first.started, first.latency_p50_ms) == (3, 3, 25)
    assert (third.failed, third.latency_p95_ms) == (1, 5_000)
    assert (series.total.succeeded, series.total.failed, series.total.started) == (3, 1, 4)
    assert series.total.latency_p95_ms == 5_000 and series.total.at == SINCE
