"""``create_app``: the dashboard as an ASGI application."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from runlane import ErrorCode, Runlane, RunlaneError
from runlane.dashboard.auth import OperatorAuth
from runlane.dashboard.errors import Refused, api_error, is_api, runlane_error_status
from runlane.dashboard.headers import SecurityHeaders
from runlane.dashboard.routes import all_routes
from runlane.dashboard.settings import Dashboard
from runlane.dashboard.templates import render

#: Seconds between automatic refreshes of the overview and runs tables (with JavaScript).
DEFAULT_REFRESH = 5.0
STATIC_DIR = Path(__file__).parent / "static"
#: Seconds after which the "storage unavailable" page asks again (and its Retry-After).
STORAGE_RETRY_AFTER = 5


def create_app(
    rl: Runlane,
    *,
    token: str | None = None,
    root_path: str = "",
    hide_payloads: bool = False,
    refresh: float = DEFAULT_REFRESH,
) -> Starlette:
    """The dashboard of ``rl`` as a Starlette app, to serve or mount in your own app.

    ``token`` enables actions for whoever proves it; without one the dashboard is
    read-only. ``root_path`` serves every route under a prefix (``/runlane``);
    when you mount the app yourself, leave it empty. ``hide_payloads`` shows
    payloads and results as ``(hidden)``. The runtime is opened on first use;
    closing it is the caller's business.

    >>> app = create_app(rl, token=os.environ.get("RUNLANE_DASHBOARD_TOKEN"))
    """
    if not isinstance(rl, Runlane):
        raise _invalid("create_app needs a Runlane runtime.")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise _invalid("token must be a non-empty string, or None for a read-only dashboard.")
    if not isinstance(root_path, str) or (root_path and not _is_prefix(root_path)):
        raise _invalid(
            f"root_path must look like '/runlane' (no trailing slash), not {root_path!r}."
        )
    if isinstance(refresh, bool) or not isinstance(refresh, int | float) or refresh < 0:
        raise _invalid("refresh must be a number of seconds, 0 or more (0 turns it off).")
    dashboard = Dashboard(
        rl=rl, auth=OperatorAuth(token), hide_payloads=bool(hide_payloads), refresh=float(refresh)
    )
    app = Starlette(
        routes=[*all_routes(), Mount("/static", StaticFiles(directory=STATIC_DIR), name="static")],
        middleware=[Middleware(SecurityHeaders)],
        exception_handlers={
            Refused: _refused,
            RunlaneError: _runlane_error,
            HTTPException: _http_error,
        },
    )
    app.state.dashboard = dashboard
    if not root_path:
        return app
    outer = Starlette(routes=[Mount(root_path, app=app)], middleware=[Middleware(SecurityHeaders)])
    outer.state.dashboard = dashboard
    return outer


def _is_prefix(path: str) -> bool:
    return path.startswith("/") and not path.endswith("/") and "//" not in path


def _invalid(message: str) -> RunlaneError:
    return RunlaneError(ErrorCode.CONFIGURATION_INVALID, message)


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    if is_api(request):
        return api_error(exc.status, exc.code, exc.message)
    return render(
        request, "error.html", {"message": exc.message, "status": exc.status}, status=exc.status
    )


async def _runlane_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RunlaneError)
    status = runlane_error_status(exc)
    if is_api(request):
        return api_error(status, exc.code.value, exc.message, exc.meta)
    if exc.code is ErrorCode.STORAGE_UNAVAILABLE:
        # A server restarting or unreachable: say so plainly, and retry by itself.
        context = {
            "message": exc.message,
            "status": status,
            "title": "Storage unavailable",
            "retry_after": STORAGE_RETRY_AFTER,
        }
        response = render(request, "error.html", context, status=status)
        response.headers["Retry-After"] = str(STORAGE_RETRY_AFTER)
        return response
    return _error_page(request, status, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "no such page." if exc.status_code == 404 else str(exc.detail)
    if is_api(request):
        code = "not_found" if exc.status_code == 404 else "http_error"
        return api_error(exc.status_code, code, message)
    return _error_page(request, exc.status_code, message)


def _error_page(request: Request, status: int, message: str) -> Response:
    return render(request, "error.html", {"message": message, "status": status}, status=status)
