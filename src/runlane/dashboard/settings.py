"""What one dashboard instance serves, and how a request finds it."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from runlane import Runlane
from runlane.dashboard.auth import OperatorAuth


@dataclass(frozen=True, slots=True)
class Dashboard:
    """The runtime a dashboard shows, with its auth and display options."""

    rl: Runlane
    auth: OperatorAuth
    hide_payloads: bool
    #: Seconds between htmx refreshes of live tables (0: never).
    refresh: float

    @property
    def read_only(self) -> bool:
        """No token configured: no action is possible, whoever asks."""
        return not self.auth.enabled


def dashboard_of(request: Request) -> Dashboard:
    """The dashboard serving ``request`` (kept in the app state by ``create_app``)."""
    dashboard: Dashboard = request.app.state.dashboard
    return dashboard
