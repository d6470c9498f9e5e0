"""The dashboard's routes, one module per page (each with its ``/api`` twin)."""

from starlette.routing import BaseRoute

from runlane.dashboard.routes import (
    dead_letters,
    groups,
    monitoring,
    overview,
    queues,
    run_detail,
    runs,
    schedules,
    session,
    subscriptions,
)


def all_routes() -> list[BaseRoute]:
    """Every page, API and action route (static files are mounted by the app)."""
    return [
        *overview.ROUTES,
        *queues.ROUTES,
        *runs.ROUTES,
        *run_detail.ROUTES,
        *groups.ROUTES,
        *schedules.ROUTES,
        *subscriptions.ROUTES,
        *dead_letters.ROUTES,
        *session.ROUTES,
        *monitoring.ROUTES,
    ]


__all__ = ["all_routes"]
