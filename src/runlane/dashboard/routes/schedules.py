"""``GET /schedules``: every registered schedule, with Pause / Resume."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from runlane import ErrorCode, RunlaneError
from runlane.dashboard.guards import check_api_operator, checked_form
from runlane.dashboard.settings import Dashboard, dashboard_of
from runlane.dashboard.templates import render
from runlane.operator import View, schedule_view

ACTIONS = ("pause", "resume")


async def schedules_data(dash: Dashboard) -> View:
    """``{"schedules": [schedule_view...]}``."""
    return {"schedules": [schedule_view(info) for info in await dash.rl.schedules.list()]}


async def perform(dash: Dashboard, schedule_id: str, action: str) -> View:
    """Pause or resume one schedule; its view afterwards."""
    if action == "pause":
        return schedule_view(await dash.rl.schedules.pause(schedule_id))
    if action == "resume":
        return schedule_view(await dash.rl.schedules.resume(schedule_id))
    raise RunlaneError(
        ErrorCode.CONFIGURATION_INVALID,
        f"unknown schedule action {action!r}; use one of {list(ACTIONS)}.",
        meta={"action": action},
    )


async def schedules_page(request: Request) -> Response:
    """The schedules as HTML."""
    return render(request, "schedules.html", await schedules_data(dashboard_of(request)))


async def schedules_api(request: Request) -> Response:
    """The schedules as JSON."""
    return JSONResponse(await schedules_data(dashboard_of(request)))


async def schedule_action_form(request: Request) -> Response:
    """``POST /schedules/{id}/{pause|resume}`` from a signed-in browser: 303 to the list."""
    await checked_form(request)
    params = request.path_params
    await perform(dashboard_of(request), params["schedule_id"], params["action"])
    return RedirectResponse(request.url_for("schedules").path, status_code=303)


async def schedule_action_api(request: Request) -> Response:
    """``POST /api/schedules/{id}/{pause|resume}`` with a Bearer token."""
    check_api_operator(request)
    params = request.path_params
    view = await perform(dashboard_of(request), params["schedule_id"], params["action"])
    return JSONResponse({"schedule": view})


ROUTES = [
    Route("/schedules", schedules_page, name="schedules"),
    Route(
        "/schedules/{schedule_id}/{action}",
        schedule_action_form,
        methods=["POST"],
        name="schedule_action",
    ),
    Route("/api/schedules", schedules_api, name="api_schedules"),
    Route(
        "/api/schedules/{schedule_id}/{action}",
        schedule_action_api,
        methods=["POST"],
        name="api_schedule_action",
    ),
]
