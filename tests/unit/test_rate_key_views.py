"""How operators see a queue limited per key: its rate limit says so, and the keys
waiting for a token are listed with their next token's time (CLI and JSON views)."""

from __future__ import annotations

from datetime import UTC, datetime

from runlane import RateLimit, RunStatus
from runlane.cli.output import queues_table
from runlane.core.queue_pauses import QueueInfo
from runlane.operator.views import queue_stats_view, queue_view
from runlane.types.runs import QueueStats

AT = datetime(2026, 12, 4, 3, 0, 1, tzinfo=UTC)


def _info(**overrides: object) -> QueueInfo:
    values: dict[str, object] = {
        "name": "tenant_sync",
        "paused": False,
        "paused_at": None,
        "paused_reason": None,
        "concurrency_limit": None,
        "default": False,
        "rate_limit": RateLimit(100, per="1m"),
        "next_token_at": AT,
        "rate_limit_by": "key",
        "limited_keys": (("tenant-7", AT), ("", AT)),
    }
    return QueueInfo(**{**values, **overrides})  # type: ignore[arg-type]


def test_the_view_names_the_partitioning_and_the_waiting_keys() -> None:
    view = queue_view(_info())
    assert view["rate_limit"] == "100/m per key"
    assert view["rate_limit_by"] == "key"
    assert view["limited_keys"] == [
        {"key": "tenant-7", "next_token_at": AT.isoformat()},
        {"key": "", "next_token_at": AT.isoformat()},
    ]
    whole = queue_view(_info(rate_limit_by=None, limited_keys=()))
    assert whole["rate_limit"] == "100/m" and whole["limited_keys"] == []


def test_the_queues_table_lists_each_waiting_key_under_its_queue() -> None:
    stats = QueueStats("tenant_sync", None, None, {RunStatus.QUEUED: 3}, 0, 3, AT, 2)
    queue = queue_view(_info())
    view = {
        **queue_stats_view(stats),
        "rate_limit": queue["rate_limit"],
        "limited_keys": queue["limited_keys"],
    }
    table = queues_table([view])
    (cell,) = list(table.columns[0].cells)
    assert "rate 100/m per key, 2 waiting for tokens" in str(cell)
    assert "key tenant-7: next" in str(cell) and "key (none): next" in str(cell)
