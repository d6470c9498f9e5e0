"""``GET /dead-letters``: deliveries parked for an operator, with Replay and Discard.

Every read and action goes through ``rl.dead_letters``. Both actions record the
dashboard's operator identity (:data:`OPERATOR_ACTOR`) and the operator's reason
in the delivery's history: Replay's reason is optional, Discard's required (as
the operator API has them), so a discard's audit trail always says why. They are
compare-and-set in the operator API: an operator who acts second sees the
``INVALID_STATE`` message, not an error page.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from runlane import DeadLetter, ErrorCode, Run, RunlaneError
from runlane.dashboard.errors import runlane_error_status
from runlane.dashboard.guards import check_api_operator, checked_form
from runlane.dashboard.routes.run_detail import HIDDEN, json_body, run_page, shown_run
from runlane.dashboard.settings import Dashboard, dashboard_of
from runlane.dashboard.templates import compact_json, render
from runlane.operator import View, dead_letter_view, event_view

#: Rows per page unless ``limit`` says otherwise (the operator API caps it at 1000).
DEFAULT_LIMIT = 50
FILTERS = ("topic", "subscription", "key")
ACTIONS = ("replay", "discard")
#: Who the audit trail names for an action taken here (there are no user accounts).
OPERATOR_ACTOR = "dashboard"
#: Characters of a payload shown in a listing row; the detail page shows it whole.
PREVIEW_CHARS = 120


def enabled(dash: Dashboard) -> bool:
    """Whether the runtime registers any subscription (else there are no dead letters)."""
    return bool(dash.rl.topic_registry.subscriptions)


def _filters(request: Request) -> dict[str, str | None]:
    return {name: request.query_params.get(name) or None for name in FILTERS}


def _limit(request: Request) -> int:
    text = request.query_params.get("limit") or str(DEFAULT_LIMIT)
    # An unparsable limit goes through as 0, so the operator API's message explains the range.
    return int(text) if text.isdigit() else 0


def shown_dead_letter(dash: Dashboard, letter: DeadLetter) -> View:
    """``dead_letter_view`` with the payload hidden when the dashboard says so."""
    view = dead_letter_view(letter)
    if dash.hide_payloads:
        view["message"]["payload"] = HIDDEN
    return view


async def dead_letters_data(dash: Dashboard, request: Request) -> View:
    """``{"enabled", "dead_letters": [dead_letter_view...], "next_cursor"}``, oldest first."""
    if not enabled(dash):
        return {"enabled": False, "dead_letters": [], "next_cursor": None}
    filters = _filters(request)
    page = await dash.rl.dead_letters.list(
        topic=filters["topic"],
        subscription=filters["subscription"],
        key=filters["key"],
        limit=_limit(request),
        cursor=request.query_params.get("cursor") or None,
    )
    return {
        "enabled": True,
        "dead_letters": [shown_dead_letter(dash, letter) for letter in page.data],
        "next_cursor": page.next_cursor,
    }


def preview(payload: Any) -> str:
    """The start of a payload as one line of JSON text (the template escapes it)."""
    text = compact_json(payload)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


async def dead_letters_page(request: Request) -> Response:
    """The dead letters as HTML, with their filter form and a "Next page" link."""
    dash = dashboard_of(request)
    filters = _filters(request)
    registry = dash.rl.topic_registry
    context: View = {
        "enabled": enabled(dash),
        "filters": filters,
        "limit": request.query_params.get("limit") or DEFAULT_LIMIT,
        "topics": sorted(registry.topics),
        "subscriptions": sorted(registry.subscriptions),
        "error": None,
        "dead_letters": [],
        "next_page": None,
        "preview": preview,
    }
    try:
        data = await dead_letters_data(dash, request)
    except RunlaneError as error:
        status = runlane_error_status(error)
        if status >= 500:
            raise
        return render(
            request, "dead_letters.html", {**context, "error": error.message}, status=status
        )
    if data["next_cursor"]:
        query = [(name, value) for name, value in filters.items() if value]
        query += [("limit", str(context["limit"])), ("cursor", data["next_cursor"])]
        context["next_page"] = f"{request.url.path}?{urlencode(query)}"
    return render(request, "dead_letters.html", {**context, **data})


async def dead_letters_api(request: Request) -> Response:
    """The dead letters as JSON (``runlane dead-letters list --json`` plus ``enabled``)."""
    return JSONResponse(await dead_letters_data(dashboard_of(request), request))


async def dead_letter_data(dash: Dashboard, dead_letter_id: str) -> View:
    """``{"dead_letter": dead_letter_view, "events": [event_view...]}``."""
    letter = await dash.rl.dead_letters.get(dead_letter_id)
    events = await dash.rl.runs.events(letter.id)
    return {
        "dead_letter": shown_dead_letter(dash, letter),
        "events": [event_view(event) for event in events],
    }


async def dead_letter_page(
    request: Request, *, flash: str | None = None, status: int = 200
) -> Response:
    """One dead letter with its delivery's history, and Replay / Discard."""
    dash = dashboard_of(request)
    data = await dead_letter_data(dash, request.path_params["dead_letter_id"])
    return render(request, "dead_letter.html", {**data, "flash": flash}, status=status)


async def dead_letter_api(request: Request) -> Response:
    """One dead letter as JSON."""
    dash = dashboard_of(request)
    return JSONResponse(await dead_letter_data(dash, request.path_params["dead_letter_id"]))


def _checked_reason(action: str, reason: object) -> str | None:
    """Discard needs a reason (5.8); replay's is optional, and a blank one is none.
    The operator API checks the rest (length, characters)."""
    if reason is not None and not isinstance(reason, str):
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            f"the {action} reason must be a string, got {type(reason).__name__}.",
            meta={"action": action},
        )
    if reason is not None and reason.strip():
        return reason
    if action == "replay":
        return None
    raise RunlaneError(
        ErrorCode.CONFIGURATION_INVALID,
        f"say why you {action} this dead letter: the reason goes into its history.",
        meta={"action": action},
    )


async def perform(dash: Dashboard, dead_letter_id: str, action: str, reason: object) -> Run:
    """Replay or discard through ``rl.dead_letters``, as :data:`OPERATOR_ACTOR`."""
    if action not in ACTIONS:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            f"unknown dead-letter action {action!r}; use one of {list(ACTIONS)}.",
            meta={"action": action},
        )
    checked = _checked_reason(action, reason)
    if action == "replay":
        run = await dash.rl.dead_letters.replay(
            dead_letter_id, reason=checked, actor=OPERATOR_ACTOR
        )
    else:
        assert checked is not None  # discard's reason is required: checked above
        run = await dash.rl.dead_letters.discard(
            dead_letter_id, reason=checked, actor=OPERATOR_ACTOR
        )
    if run is None:
        # Only an SNS subscription's dead letter (named with subscription=) answers
        # None, and the dashboard lists stored dead letters only.
        raise RunlaneError(
            ErrorCode.DEAD_LETTER_NOT_FOUND,
            f"dead letter {dead_letter_id!r} is not a stored dead letter.",
            meta={"dead_letter_id": dead_letter_id},
        )
    return run


async def dead_letter_action_form(request: Request) -> Response:
    """``POST /dead-letters/{id}/{replay|discard}`` from a signed-in browser.

    Done: 303 to the delivery's run page (its history shows the action). A blank
    Replay reason is no reason; a missing Discard reason re-renders the dead letter
    with the message (400); losing a race to another operator shows the run as it
    is now with the message (409).
    """
    form = await checked_form(request)
    dash = dashboard_of(request)
    dead_letter_id = request.path_params["dead_letter_id"]
    try:
        run = await perform(dash, dead_letter_id, request.path_params["action"], form.get("reason"))
    except RunlaneError as error:
        status = runlane_error_status(error)
        if error.code is ErrorCode.CONFIGURATION_INVALID:
            return await dead_letter_page(request, flash=error.message, status=status)
        if error.code is ErrorCode.INVALID_STATE:
            flash = f"Not done: {error.message}"
            return await run_page(request, run_id=dead_letter_id, flash=flash, status=status)
        raise
    return RedirectResponse(request.url_for("run", run_id=run.id).path, status_code=303)


async def dead_letter_action_api(request: Request) -> Response:
    """``POST /api/dead-letters/{id}/{replay|discard}`` with a Bearer token and
    ``{"reason": str}`` (optional for replay, required for discard): ``{"run":
    run_view}`` of the delivery afterwards."""
    check_api_operator(request)
    dash = dashboard_of(request)
    body = await json_body(request)
    params = request.path_params
    run = await perform(dash, params["dead_letter_id"], params["action"], body.get("reason"))
    return JSONResponse({"run": shown_run(dash, run)})


ROUTES = [
    Route("/dead-letters", dead_letters_page, name="dead_letters"),
    Route("/dead-letters/{dead_letter_id}", dead_letter_page, name="dead_letter"),
    Route(
        "/dead-letters/{dead_letter_id}/{action}",
        dead_letter_action_form,
        methods=["POST"],
        name="dead_letter_action",
    ),
    Route("/api/dead-letters", dead_letters_api, name="api_dead_letters"),
    Route("/api/dead-letters/{dead_letter_id}", dead_letter_api, name="api_dead_letter"),
    Route(
        "/api/dead-letters/{dead_letter_id}/{action}",
        dead_letter_action_api,
        methods=["POST"],
        name="api_dead_letter_action",
    ),
]
