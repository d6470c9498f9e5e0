"""Signing in and out: ``GET/POST /login`` and ``POST /logout``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from runlane.dashboard.auth import SESSION_COOKIE, SESSION_LIFETIME
from runlane.dashboard.csrf import is_same_origin
from runlane.dashboard.errors import READ_ONLY, forbidden
from runlane.dashboard.guards import checked_form
from runlane.dashboard.settings import dashboard_of
from runlane.dashboard.templates import render


def _cookie_path(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root + "/"


async def login_page(request: Request) -> Response:
    """The sign-in form (a password field: the token never appears in a URL)."""
    return render(request, "login.html", {"problem": None})


async def login(request: Request) -> Response:
    """Check the token; on success set the signed session cookie and go to the overview."""
    dash = dashboard_of(request)
    if dash.read_only:
        raise forbidden(READ_ONLY)
    if not is_same_origin(request):
        raise forbidden("cross-origin form posts are refused.")
    form = await request.form()
    token = form.get("token")
    if not dash.auth.token_matches(token if isinstance(token, str) else None):
        return render(request, "login.html", {"problem": "That is not the token."}, status=401)
    response = RedirectResponse(request.url_for("overview").path, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        dash.auth.new_session(),
        max_age=SESSION_LIFETIME,
        path=_cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    """Clear the session cookie (a signed-in, same-origin form with its CSRF token)."""
    await checked_form(request)
    response = RedirectResponse(request.url_for("overview").path, status_code=303)
    response.delete_cookie(
        SESSION_COOKIE, path=_cookie_path(request), httponly=True, samesite="strict"
    )
    return response


ROUTES = [
    Route("/login", login_page, name="login"),
    Route("/login", login, methods=["POST"], name="login_submit"),
    Route("/logout", logout, methods=["POST"], name="logout"),
]
