"""``GET /subscriptions``: each subscription's deliveries by status, and halted keys.

An ORDERED subscription's key stops at a dead-lettered head until an operator
replays or discards it; the page lists the first :data:`HALTED_SHOWN` such keys
of each, with a link to the dead letter to act on. ``/api/subscriptions/{name}/
halted-keys`` pages through all of them.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runlane import SubscriptionMode
from runlane.dashboard.settings import Dashboard, dashboard_of
from runlane.dashboard.templates import render
from runlane.operator import View, halted_key_view, subscription_stats_view

#: Halted keys listed per ORDERED subscription on the page and in its JSON twin.
HALTED_SHOWN = 20
DEFAULT_LIMIT = 50


async def subscriptions_data(dash: Dashboard) -> View:
    """``{"enabled", "subscriptions": [subscription_stats_view + "halted": [...]]}``.

    ``halted`` holds the first :data:`HALTED_SHOWN` halted keys of an ORDERED
    subscription (``halted_keys`` counts them all) and is empty for other modes.
    """
    if not dash.rl.topic_registry.subscriptions:
        return {"enabled": False, "subscriptions": []}
    views = []
    for stats in await dash.rl.subscriptions.list():
        view = subscription_stats_view(stats)
        halted: list[View] = []
        if stats.mode is SubscriptionMode.ORDERED and stats.halted_keys:
            page = await dash.rl.subscriptions.halted_keys(stats.name, limit=HALTED_SHOWN)
            halted = [halted_key_view(key) for key in page.data]
        views.append({**view, "halted": halted})
    return {"enabled": True, "subscriptions": views}


async def subscriptions_page(request: Request) -> Response:
    """The subscriptions as HTML."""
    data = await subscriptions_data(dashboard_of(request))
    return render(request, "subscriptions.html", {**data, "halted_shown": HALTED_SHOWN})


async def subscriptions_api(request: Request) -> Response:
    """The subscriptions as JSON."""
    return JSONResponse(await subscriptions_data(dashboard_of(request)))


async def halted_keys_api(request: Request) -> Response:
    """``{"halted_keys": [halted_key_view...], "next_cursor"}`` of one subscription, by key."""
    dash = dashboard_of(request)
    text = request.query_params.get("limit") or str(DEFAULT_LIMIT)
    page = await dash.rl.subscriptions.halted_keys(
        request.path_params["name"],
        # An unparsable limit goes through as 0, so the operator API's message explains it.
        limit=int(text) if text.isdigit() else 0,
        cursor=request.query_params.get("cursor") or None,
    )
    return JSONResponse(
        {"halted_keys": [halted_key_view(k) for k in page.data], "next_cursor": page.next_cursor}
    )


ROUTES = [
    Route("/subscriptions", subscriptions_page, name="subscriptions"),
    Route("/api/subscriptions", subscriptions_api, name="api_subscriptions"),
    Route("/api/subscriptions/{name}/halted-keys", halted_keys_api, name="api_subscription_halted"),
]
