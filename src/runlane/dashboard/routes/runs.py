"""``GET /runs``: runs newest first, filtered by status, task and queue, paged by cursor."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runlane import RunlaneError
from runlane.dashboard.errors import runlane_error_status
from runlane.dashboard.routes.run_detail import shown_progress
from runlane.dashboard.settings import Dashboard, dashboard_of
from runlane.dashboard.templates import render
from runlane.operator import RUN_ROW_FIELDS, View, run_row

#: Rows per page unless ``limit`` says otherwise (the operator API caps it at 1000).
DEFAULT_LIMIT = 50
FILTERS = ("status", "task", "queue")


def _filters(request: Request) -> dict[str, list[str]]:
    return {name: [v for v in request.query_params.getlist(name) if v] for name in FILTERS}


def _limit(request: Request) -> int:
    text = request.query_params.get("limit") or str(DEFAULT_LIMIT)
    # An unparsable limit goes through as 0, so the operator API's message explains the range.
    return int(text) if text.isdigit() else 0


async def runs_data(dash: Dashboard, request: Request) -> View:
    """One page of runs: ``{"runs": [run_row...], "next_cursor": str | None}``."""
    filters = _filters(request)
    page = await dash.rl.runs.list(
        statuses=filters["status"],
        tasks=filters["task"],
        queues=filters["queue"],
        limit=_limit(request),
        cursor=request.query_params.get("cursor") or None,
    )
    rows = [shown_progress(dash, run_row(run)) for run in page.data]
    return {"runs": rows, "next_cursor": page.next_cursor}


async def runs_page(request: Request) -> Response:
    """The runs listing as HTML, with its filter form and a "Next page" link."""
    dash = dashboard_of(request)
    filters = _filters(request)
    context: View = {
        "filters": filters,
        "limit": request.query_params.get("limit") or DEFAULT_LIMIT,
        # A subscription's deliveries are runs whose task id is its name.
        "tasks": sorted([*dash.rl.tasks, *dash.rl.topic_registry.subscriptions]),
        "queues": sorted(dash.rl.queues),
        "columns": RUN_ROW_FIELDS,
        "error": None,
        "runs": [],
        "next_page": None,
    }
    try:
        data = await runs_data(dash, request)
    except RunlaneError as error:
        status = runlane_error_status(error)
        if status >= 500:
            raise
        return render(request, "runs.html", {**context, "error": error.message}, status=status)
    if data["next_cursor"]:
        query = [(name, value) for name in FILTERS for value in filters[name]]
        query += [("limit", str(context["limit"])), ("cursor", data["next_cursor"])]
        context["next_page"] = f"{request.url.path}?{urlencode(query)}"
    return render(request, "runs.html", {**context, **data})


async def runs_api(request: Request) -> Response:
    """The runs listing as JSON (the same shape as ``runlane runs list --json``)."""
    return JSONResponse(await runs_data(dashboard_of(request), request))


ROUTES = [
    Route("/runs", runs_page, name="runs"),
    Route("/api/runs", runs_api, name="api_runs"),
]
