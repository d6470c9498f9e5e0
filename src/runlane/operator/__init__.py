"""The operator layer: what the CLI, the dashboard and metrics build on.

It loads the user's runtime from an import path and turns runtime records into
presentation-neutral views. Surfaces call the runtime's public API
(``rl.runs``, ``rl.queue_stats()``, ``rl.tick()``) and render these views; they
never reach into storage.
"""

from runlane.operator.loading import APP_ENV_VAR, load_runtime
from runlane.operator.views import (
    DEAD_LETTER_ROW_FIELDS,
    RUN_ROW_FIELDS,
    THROUGHPUT_OUTCOMES,
    View,
    active_run_count,
    dead_letter_view,
    event_view,
    group_view,
    halted_key_view,
    iso,
    progress_view,
    publish_receipt_view,
    queue_stats_view,
    queue_view,
    related_run_view,
    run_row,
    run_view,
    run_with_relations_view,
    schedule_view,
    subscription_stats_view,
    throughput_point_view,
    throughput_series_view,
    throughput_view,
    tick_report_view,
)
from runlane.types.durations import parse_duration

__all__ = [
    "APP_ENV_VAR",
    "DEAD_LETTER_ROW_FIELDS",
    "RUN_ROW_FIELDS",
    "THROUGHPUT_OUTCOMES",
    "View",
    "active_run_count",
    "dead_letter_view",
    "event_view",
    "group_view",
    "halted_key_view",
    "iso",
    "load_runtime",
    "parse_duration",
    "progress_view",
    "publish_receipt_view",
    "queue_stats_view",
    "queue_view",
    "related_run_view",
    "run_row",
    "run_view",
    "run_with_relations_view",
    "schedule_view",
    "subscription_stats_view",
    "throughput_point_view",
    "throughput_series_view",
    "throughput_view",
    "tick_report_view",
]
