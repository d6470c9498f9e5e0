"""``GET /``: one row per registered queue, with counts for every status."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runlane import QueueStats, RunStatus
from runlane.dashboard.routes.queues import CHART_WINDOWS, chart_window, charts, throughput_data
from runlane.dashboard.settings import Dashboard, dashboard_of
from runlane.dashboard.templates import render
from runlane.operator import View, iso, queue_stats_view, queue_view, throughput_view

#: Windows of the "finished" columns: label → how far back.
THROUGHPUT_WINDOWS = {"5m": "5m", "1h": "1h"}


async def overview_data(dash: Dashboard) -> View:
    """Per-queue counts (bounded queues summed over their concurrency keys) and totals."""
    grouped: dict[str, list[QueueStats]] = {}
    for entry in await dash.rl.queue_stats():
        grouped.setdefault(entry.queue, []).append(entry)
    windows = {
        label: {t.queue: throughput_view(t) for t in await dash.rl.throughput(since)}
        for label, since in THROUGHPUT_WINDOWS.items()
    }
    pauses = {info.name: info for info in await dash.rl.queues.list()}
    queues = [
        {
            **_queue_row(name, parts),
            "paused": pauses[name].paused,
            "paused_at": iso(pauses[name].paused_at),
            "paused_reason": pauses[name].paused_reason,
            "rate_limit": queue_view(pauses[name])["rate_limit"],
            "next_token_at": iso(pauses[name].next_token_at),
            "throughput": {
                label: {k: v for k, v in by_queue[name].items() if k != "queue"}
                for label, by_queue in windows.items()
            },
        }
        for name, parts in grouped.items()
    ]
    totals = {status.value: sum(q["counts"][status.value] for q in queues) for status in RunStatus}
    return {
        "environment": dash.rl.environment,
        "read_only": dash.read_only,
        "queues": queues,
        "totals": totals,
        "dead_letters": await _dead_letters(dash),
    }


async def _dead_letters(dash: Dashboard) -> View:
    """``{"enabled", "count"}``: dead letters over every subscription (0 without any)."""
    if not dash.rl.topic_registry.subscriptions:
        return {"enabled": False, "count": 0}
    stats = await dash.rl.subscriptions.list()
    return {"enabled": True, "count": sum(s.dead_lettered for s in stats)}


def _queue_row(name: str, parts: list[QueueStats]) -> View:
    oldest = min((p.oldest_due_at for p in parts if p.oldest_due_at is not None), default=None)
    bounded = parts[0].concurrency_limit is not None
    return {
        "queue": name,
        "concurrency_limit": parts[0].concurrency_limit,
        "waiting": sum(p.waiting for p in parts),
        "due": sum(p.due for p in parts),
        "oldest_due_at": iso(oldest),
        "running": sum(p.running for p in parts),
        "occupied": sum(p.occupied for p in parts),
        "rate_limited": sum(p.rate_limited for p in parts),
        "counts": {s.value: sum(p.counts.get(s, 0) for p in parts) for s in RunStatus},
        "partitions": [queue_stats_view(p) for p in parts] if bounded else [],
    }


async def overview_page(request: Request) -> Response:
    """The overview as HTML, with the charts of every queue together."""
    dash = dashboard_of(request)
    window = chart_window(request)
    series = await throughput_data(dash, None, window)
    context = {
        **await overview_data(dash),
        "window": window,
        "windows": CHART_WINDOWS,
        "series": series,
        "charts": charts(series),
    }
    return render(request, "overview.html", context)


async def overview_api(request: Request) -> Response:
    """The overview as JSON."""
    return JSONResponse(await overview_data(dashboard_of(request)))


ROUTES = [
    Route("/", overview_page, name="overview"),
    Route("/api/overview", overview_api, name="api_overview"),
]
