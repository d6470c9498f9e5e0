"""``GET /groups/{id}``: a group's progress (done/total, failures) and its members."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runlane.dashboard.settings import Dashboard, dashboard_of
from runlane.dashboard.templates import render
from runlane.operator import View, group_view, run_row

#: Members shown on a group's page (the runs page lists them all with ``?group=``).
MEMBERS_SHOWN = 100


async def group_data(dash: Dashboard, group_id: str) -> View:
    """``{"group": group_view, "members": [run_row...]}`` (the first members)."""
    group = group_view(await dash.rl.groups.get(group_id))
    page = await dash.rl.runs.list(group=group_id, limit=MEMBERS_SHOWN)
    return {"group": group, "members": [run_row(run) for run in page.data]}


async def group_page(request: Request) -> Response:
    """One group as HTML."""
    data = await group_data(dashboard_of(request), request.path_params["group_id"])
    return render(request, "group.html", data)


async def group_api(request: Request) -> Response:
    """One group as JSON."""
    return JSONResponse(await group_data(dashboard_of(request), request.path_params["group_id"]))


ROUTES = [
    Route("/groups/{group_id}", group_page, name="group"),
    Route("/api/groups/{group_id}", group_api, name="api_group"),
]
