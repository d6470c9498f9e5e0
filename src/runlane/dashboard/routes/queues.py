"""``GET /queues/{name}``: one queue's limits, pause state, counts and throughput
charts; the JSON twins of the charts (``/api/queues/{name}/throughput``, and
``/api/throughput`` for every queue together, which the overview draws); and
``POST /queues/{name}/{pause|resume}`` (a signed-in browser) with its ``/api`` twin
(a Bearer token)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from runlane import ErrorCode, RunlaneError, RunStatus
from runlane.dashboard.charts import finished_chart, latency_chart
from runlane.dashboard.errors import Refused
from runlane.dashboard.guards import check_api_operator, checked_form
from runlane.dashboard.routes.run_detail import json_body
from runlane.dashboard.settings import Dashboard, dashboard_of
from runlane.dashboard.templates import render
from runlane.operator import View, queue_stats_view, queue_view, throughput_series_view

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
    (info,) = [i for i in await dash.rl.queues.list() if i.name == name]
    series = await throughput_data(dash, name, window)
    context: View = {
        **queue_view(info),
        "queue": name,
        "window": window,
        "windows": CHART_WINDOWS,
        "concurrency_limit": stats[0].concurrency_limit if stats else None,
        "rate_limited": sum(p.rate_limited for p in stats),
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


ACTIONS = ("pause", "resume")


async def perform(dash: Dashboard, name: str, action: str, reason: str | None) -> View:
    """Pause or resume one queue; its view afterwards."""
    if action == "pause":
        return queue_view(await dash.rl.queues.pause(name, reason=reason or None))
    if action == "resume":
        return queue_view(await dash.rl.queues.resume(name))
    raise RunlaneError(
        ErrorCode.CONFIGURATION_INVALID,
        f"unknown queue action {action!r}; use one of {list(ACTIONS)}.",
        meta={"action": action},
    )


async def queue_action_form(request: Request) -> Response:
    """``POST /queues/{name}/{pause|resume}`` from a signed-in browser: 303 to its page."""
    form = await checked_form(request)
    reason = form.get("reason")
    params = request.path_params
    await perform(
        dashboard_of(request),
        params["name"],
        params["action"],
        reason if isinstance(reason, str) else None,
    )
    return RedirectResponse(request.url_for("queue", name=params["name"]).path, status_code=303)


async def queue_action_api(request: Request) -> Response:
    """``POST /api/queues/{name}/{pause|resume}`` with a Bearer token: ``{"queue": view}``."""
    check_api_operator(request)
    body = await json_body(request)
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise RunlaneError(ErrorCode.CONFIGURATION_INVALID, "reason must be a string.")
    params = request.path_params
    view = await perform(dashboard_of(request), params["name"], params["action"], reason)
    return JSONResponse({"queue": view})


ROUTES = [
    Route("/queues/{name}", queue_page, name="queue"),
    Route("/api/queues/{name}/throughput", queue_throughput_api, name="api_queue_throughput"),
    Route("/api/throughput", throughput_api, name="api_throughput"),
    Route("/queues/{name}/{action}", queue_action_form, methods=["POST"], name="queue_action"),
    Route(
        "/api/queues/{name}/{action}",
        queue_action_api,
        methods=["POST"],
        name="api_queue_action",
    ),
]
