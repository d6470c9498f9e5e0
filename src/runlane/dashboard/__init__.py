"""The web dashboard (``pip install 'runlane[dashboard]'``).

``runlane dashboard APP`` serves it; :func:`create_app` returns the ASGI app to
mount inside your own Starlette or FastAPI application:

>>> from starlette.routing import Mount
>>> routes = [Mount("/runlane", app=create_app(rl, token=os.environ["RUNLANE_DASHBOARD_TOKEN"]))]

Without a token the dashboard is read-only. Every page has a JSON twin under
``/api``; state changes need the token (a signed session cookie plus a CSRF
token in the browser, ``Authorization: Bearer`` for scripts).
"""

from runlane.dashboard.requirements import require_extra

require_extra()

from runlane.dashboard.app import DEFAULT_REFRESH, create_app  # noqa: E402

__all__ = ["DEFAULT_REFRESH", "create_app"]
