"""``GET /runs/{id}``: one run with its event timeline, and its actions (cancel, retry, rerun)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from runlane import ErrorCode, Run, RunlaneError, RunStatus
from runlane.dashboard.errors import runlane_error_status
from runlane.dashboard.guards import check_api_operator, checked_form
from runlane.dashboard.settings import Dashboard, dashboard_of
from runlane.dashboard.templates import render
from runlane.operator import View, event_view, related_run_view, run_view

#: Shown instead of payloads and results on a ``hide_payloads`` dashboard.
HIDDEN = "(hidden)"
ACTIONS = ("cancel", "retry", "rerun")


def shown_run(dash: Dashboard, run: Run) -> View:
    """``run_view`` with payload, result and progress data hidden when the dashboard
    says so."""
    view = run_view(run)
    if dash.hide_payloads:
        view["payload"] = view["result"] = HIDDEN
    return shown_progress(dash, view)


def shown_progress(dash: Dashboard, view: View) -> View:
    """A run view or row whose progress data (the task's own values, as a result is)
    is hidden when the dashboard hides payloads."""
    progress = view.get("progress")
    if dash.hide_payloads and progress is not None and progress["data"] is not None:
        view["progress"] = {**progress, "data": HIDDEN}
    return view


async def run_data(dash: Dashboard, run_id: str) -> View:
    """``{"run": run_view, "events": [event_view...], "dependencies": [...],
    "dependents": [...]}`` (events oldest first; dependencies in the order given)."""
    run, events = await _run_and_events(dash, run_id)
    return {"run": shown_run(dash, run), "events": events, **await _relations(dash, run_id)}


async def _relations(dash: Dashboard, run_id: str) -> View:
    """The run's dependencies and dependents, each with its status."""
    dependencies = await dash.rl.runs.dependencies(run_id)
    dependents = await dash.rl.runs.dependents(run_id)
    return {
        "dependencies": [related_run_view(run) for run in dependencies],
        "dependents": [related_run_view(run) for run in dependents],
    }


async def _run_and_events(dash: Dashboard, run_id: str) -> tuple[Run, list[View]]:
    run = await dash.rl.runs.get(run_id)
    events = await dash.rl.runs.events(run_id)
    return run, [event_view(e) for e in events]


def allowed_actions(status: str, *, delivery: bool = False) -> list[str]:
    """The actions the operator API accepts for a run in ``status``.

    A subscription's delivery is never retried or rerun, and a dead letter is
    replayed or discarded on its own page rather than cancelled.
    """
    current = RunStatus(status)
    if current in (RunStatus.CANCELLATION_REQUESTED, RunStatus.DEAD_LETTERED):
        return []
    if current.is_active:
        return ["cancel"]
    if delivery:
        return []
    return ["retry", "rerun"] if current is RunStatus.FAILED else ["rerun"]


async def run_page(
    request: Request,
    *,
    run_id: str | None = None,
    flash: str | None = None,
    status: int = 200,
) -> Response:
    """One run as HTML (``run_id`` defaults to the path's)."""
    dash = dashboard_of(request)
    run, events = await _run_and_events(dash, run_id or request.path_params["run_id"])
    view = shown_run(dash, run)
    failure = view["failure"] or {}
    meta = dict(failure.get("meta") or {})
    delivery = run.mode is not None
    context = {
        "run": view,
        "events": events,
        "delivery": delivery,
        "mode": run.mode.value if run.mode is not None else None,
        "traceback": meta.pop("traceback", None),
        "failure_meta": meta,
        "actions": allowed_actions(view["status"], delivery=delivery),
        "flash": flash,
        **await _relations(dash, run.id),
    }
    return render(request, "run.html", context, status=status)


async def perform(dash: Dashboard, run_id: str, action: str, reason: str | None) -> Run:
    """Call the operator API for ``action``; the new run for retry and rerun."""
    if action == "cancel":
        return await dash.rl.runs.cancel(run_id, reason or None)
    if action == "retry":
        return await dash.rl.runs.retry(run_id)
    if action == "rerun":
        return await dash.rl.runs.rerun(run_id)
    raise RunlaneError(
        ErrorCode.CONFIGURATION_INVALID,
        f"unknown run action {action!r}; use one of {list(ACTIONS)}.",
        meta={"action": action},
    )


async def run_action_form(request: Request) -> Response:
    """``POST /runs/{id}/{cancel|retry|rerun}`` from a signed-in browser: 303 to the run."""
    form = await checked_form(request)
    dash = dashboard_of(request)
    run_id = request.path_params["run_id"]
    reason = form.get("reason")
    try:
        run = await perform(
            dash, run_id, request.path_params["action"], reason if isinstance(reason, str) else None
        )
    except RunlaneError as error:
        if error.code is not ErrorCode.INVALID_STATE:
            raise
        return await run_page(request, flash=error.message, status=runlane_error_status(error))
    return RedirectResponse(request.url_for("run", run_id=run.id).path, status_code=303)


async def run_api(request: Request) -> Response:
    """One run as JSON."""
    return JSONResponse(await run_data(dashboard_of(request), request.path_params["run_id"]))


async def run_action_api(request: Request) -> Response:
    """``POST /api/runs/{id}/{action}`` with a Bearer token: ``{"run": run_view}``."""
    check_api_operator(request)
    dash = dashboard_of(request)
    body = await json_body(request)
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise RunlaneError(ErrorCode.CONFIGURATION_INVALID, "reason must be a string.")
    run = await perform(dash, request.path_params["run_id"], request.path_params["action"], reason)
    return JSONResponse({"run": shown_run(dash, run)})


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object (``{}`` for an empty body); anything else is a 400."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            'the request body must be a JSON object such as {"reason": "..."}, or empty.',
        )
    return body


ROUTES = [
    Route("/runs/{run_id}", run_page, name="run"),
    Route("/runs/{run_id}/{action}", run_action_form, methods=["POST"], name="run_action"),
    Route("/api/runs/{run_id}", run_api, name="api_run"),
    Route("/api/runs/{run_id}/{action}", run_action_api, methods=["POST"], name="api_run_action"),
]
