"""Prometheus metrics for Runlane (``pip install 'runlane[metrics]'``).

``prometheus_metrics()`` is an observer counting what this process does
(triggers, attempts and their outcomes, durations, start latency, lease
expirations, maintenance, worker slots)::

    from runlane.metrics import prometheus_metrics

    rl = Runlane(lane=..., queues=[...], tasks=[...], observers=[prometheus_metrics()])

``runlane worker APP --metrics-port 9464`` attaches it and serves ``/metrics``.
"""

from runlane.metrics.process import DURATION_BUCKETS, PrometheusMetrics, prometheus_metrics

__all__ = ["DURATION_BUCKETS", "PrometheusMetrics", "prometheus_metrics"]
