"""Who may act: every state change passes one of these checks before it touches storage."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request

from runlane.dashboard.csrf import CSRF_FIELD, CSRF_HEADER, csrf_matches, is_same_origin
from runlane.dashboard.errors import READ_ONLY, forbidden, unauthorized
from runlane.dashboard.settings import dashboard_of


async def checked_form(request: Request) -> FormData:
    """The form of a browser action, once the operator, origin and CSRF token check out.

    Raises :class:`~runlane.dashboard.errors.Refused` (403 read-only or
    cross-origin or bad CSRF token, 401 not signed in).
    """
    dash = dashboard_of(request)
    if dash.read_only:
        raise forbidden(READ_ONLY)
    if not is_same_origin(request):
        raise forbidden("cross-origin form posts are refused.")
    session = dash.auth.session_of(request)
    if session is None:
        raise unauthorized()
    form = await request.form()
    submitted = form.get(CSRF_FIELD)
    token = submitted if isinstance(submitted, str) else request.headers.get(CSRF_HEADER)
    if not csrf_matches(dash.auth, session, token):
        raise forbidden("the form's CSRF token is missing or stale; reload the page and try again.")
    return form


def check_api_operator(request: Request) -> None:
    """An ``/api`` action needs ``Authorization: Bearer <token>``; cookies are ignored here."""
    dash = dashboard_of(request)
    if dash.read_only:
        raise forbidden(READ_ONLY)
    if not dash.auth.bearer_matches(request):
        raise unauthorized("send the operator token as 'Authorization: Bearer <token>'.")
