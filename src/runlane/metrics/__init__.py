"""Prometheus metrics for Runlane (``pip install 'runlane[metrics]'``).

:mod:`runlane.metrics.storage` reads gauges from storage at scrape time (runs per
queue and status, due runs, the oldest due age, the outbox backlog); serve them
from one process per environment, such as ``runlane dashboard``, so they are
not multiplied by the number of workers.
"""

from runlane.metrics.storage import StorageGaugeCollector, StorageSnapshot, read_storage_snapshot

__all__ = ["StorageGaugeCollector", "StorageSnapshot", "read_storage_snapshot"]
