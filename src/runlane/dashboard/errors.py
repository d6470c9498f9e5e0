"""How refusals and operator-API errors become HTTP answers (HTML page or JSON body)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from runlane import ErrorCode, RunlaneError

#: HTTP status for each operator-API error code the dashboard can meet; others are 500.
STATUS_BY_CODE = {
    ErrorCode.CONFIGURATION_INVALID: 400,
    ErrorCode.QUEUE_NOT_FOUND: 400,
    ErrorCode.TASK_NOT_FOUND: 400,
    ErrorCode.RUN_NOT_FOUND: 404,
    ErrorCode.SCHEDULE_NOT_FOUND: 404,
    ErrorCode.DEAD_LETTER_NOT_FOUND: 404,
    # Unknown topics and subscriptions are bad filters, as unknown queues and tasks are.
    ErrorCode.TOPIC_NOT_FOUND: 400,
    ErrorCode.SUBSCRIPTION_NOT_FOUND: 400,
    ErrorCode.INVALID_STATE: 409,
    ErrorCode.STORAGE_CONFLICT: 409,
    ErrorCode.STORAGE_UNAVAILABLE: 503,
    ErrorCode.CAPABILITY_UNSUPPORTED: 501,
}


class Refused(Exception):
    """A request the dashboard will not serve: no credentials, read-only, CSRF, ..."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def unauthorized(message: str = "sign in with the operator token to act.") -> Refused:
    """401: no or wrong credentials."""
    return Refused(401, "unauthorized", message)


def forbidden(message: str) -> Refused:
    """403: read-only dashboard, bad CSRF token or a cross-origin form."""
    return Refused(403, "forbidden", message)


READ_ONLY = (
    "this dashboard is read-only: start it with a token (RUNLANE_DASHBOARD_TOKEN) to allow actions."
)


def is_api(request: Request) -> bool:
    """Whether the request addresses the JSON API (``/api/...`` under any mount prefix)."""
    return request.url.path.removeprefix(request.scope.get("root_path", "")).startswith("/api/")


def error_body(code: str, message: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON error shape of every ``/api`` answer that is not a success."""
    return {"error": {"code": code, "message": message, "meta": meta or {}}}


def api_error(status: int, code: str, message: str, meta: dict[str, Any] | None = None) -> Response:
    """A JSON error; 401 answers name the Bearer scheme."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(error_body(code, message, meta), status_code=status, headers=headers)


def runlane_error_status(error: RunlaneError) -> int:
    """The HTTP status of an operator-API error."""
    return STATUS_BY_CODE.get(error.code, 500)
