"""``GET /queues/{name}``: one queue's limits, counts and throughput charts; the JSON
twins of the charts (``/api/queues/{name}/throughput``, and ``/api/throughput`` for every
queue together, which the overview draws)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runlane import RunStatus
from runlane.dashboard.charts import finished_chart, latency_chart
from runlane.dashboard.errors import Refused
from runlane.dashboard.settings import Dashboard, dashboard_of
from runlane.dashboard.templates import render
from runlane.operator import View, queue_stats_view, throughput_series_view

#: The windows a chart can show, as the ``window`` query parameter names them.
CHART_WINDOWS = ("1h", "1d")


def chart_window(request: Request) -> str:
    """The ``window`` query parameter (``1h`` by default); 400 for another value."""
    window = request.query_params.get("window") or "1h"
    if window not in CHART_WINDOWS:
        raise Refused(400, "configuration_invalid", f"window must be one of {list(CHART_WINDOWS)}.")
    return window


async def throughput_data(dash: Dashboard, queue: str | None, window: str) -> View:
    """The chart data of ``queue`` (``None``: every queue) over ``window``."""
    return throughput_series_view(await dash.rl.throughput_series(queue, window=window))


def charts(series: View) -> View:
    """The two SVG charts of a series, for a template."""
    return {"finished": finished_chart(series), "latency": latency_chart(series)}


def _queue_name(dash: Dashboard, request: Request) -> str:
    name = str(request.path_params["name"])
    if name not in dash.rl.queues:
        raise Refused(404, "queue_not_found", f"queue {name!r} is not registered.")
    return name


async def queue_page(request: Request) -> Response:
    """One queue: its limit, its counts, and its charts over the chosen window."""
    dash = dashboard_of(request)
    name = _queue_name(dash, request)
    window = chart_window(request)
    stats = [s for s in await dash.rl.queue_stats() if s.queue == name]
    series = await throughput_data(dash, name, window)
    context: View = {
        "queue": name,
        "window": window,
        "windows": CHART_WINDOWS,
        "concurrency_limit": stats[0].concurrency_limit if stats else None,
        "counts": {s.value: sum(p.counts.get(s, 0) for p in stats) for s in RunStatus},
        "partitions": [queue_stats_view(p) for p in stats],
        "series": series,
        "charts": charts(series),
    }
    return render(request, "queue.html", context)


async def queue_throughput_api(request: Request) -> Response:
    """One queue's chart data as JSON."""
    dash = dashboard_of(request)
    name = _queue_name(dash, request)
    return JSONResponse(await throughput_data(dash, name, chart_window(request)))


async def throughput_api(request: Request) -> Response:
    """Every queue's chart data together as JSON (the overview's charts)."""
    dash = dashboard_of(request)
    return JSONResponse(await throughput_data(dash, None, chart_window(request)))


ROUTES = [
    Route("/queues/{name}", queue_page, name="queue"),
    Route("/api/queues/{name}/throughput", queue_throughput_api, name="api_queue_throughput"),
    Route("/api/throughput", throughput_api, name="api_throughput"),
]
