"""Prometheus metrics for Runlane (``pip install 'runlane[metrics]'``).

``prometheus_metrics()`` is an observer counting what this process does
(triggers, attempts and their outcomes, durations, start latency, lease
expirations, maintenance, worker slots)::

    from runlane.metrics import prometheus_metrics

    rl = Runlane(lane=..., queues=[...], tasks=[...], observers=[prometheus_metrics()])

``runlane worker APP --metrics-port 9464`` attaches it and serves ``/metrics``.

:mod:`runlane.metrics.storage` reads gauges from storage at scrape time (runs per
queue and status, due runs, the oldest due age, the outbox backlog); serve them
from one process per environment, such as ``runlane dashboard``, so they are
not multiplied by the number of workers.
"""

from runlane.metrics.process import DURATION_BUCKETS, PrometheusMetrics, prometheus_metrics
from runlane.metrics.storage import StorageGaugeCollector, StorageSnapshot, read_storage_snapshot

__all__ = [
    "DURATION_BUCKETS",
    "PrometheusMetrics",
    "StorageGaugeCollector",
    "StorageSnapshot",
    "prometheus_metrics",
    "read_storage_snapshot",
]
