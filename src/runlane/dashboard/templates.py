"""Jinja2 templates with autoescaping on, and the context every page shares."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from runlane import RunStatus
from runlane.dashboard.csrf import CSRF_FIELD, csrf_token
from runlane.dashboard.settings import dashboard_of

TEMPLATE_DIR = Path(__file__).parent / "templates"
#: The navigation bar: (route name, label). A new page adds its routes module and
#: one entry here.
NAV_PAGES = (
    ("overview", "Overview"),
    ("runs", "Runs"),
    ("schedules", "Schedules"),
    ("subscriptions", "Subscriptions"),
    ("dead_letters", "Dead letters"),
)

# Autoescaping is forced for every template: all stored data (payloads, results,
# failure text, task ids) is user-controlled.
_environment = Environment(
    loader=FileSystemLoader(TEMPLATE_DIR),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def pretty_json(value: Any) -> str:
    """Indented JSON for display (escaped by the template like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def compact_json(value: Any) -> str:
    """One-line JSON for display; strings keep their quotes only inside containers."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def relative(iso_time: str | None, now: datetime) -> str:
    """``in 3m`` / ``5s ago`` for an ISO 8601 time, or ``""``."""
    if not iso_time:
        return ""
    seconds = (datetime.fromisoformat(iso_time) - now).total_seconds()
    amount = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if amount >= size:
            text = f"{int(amount // size)}{unit}"
            break
    else:
        text = f"{int(amount)}s"
    return f"in {text}" if seconds > 0 else f"{text} ago"


def short_time(iso_time: str | None) -> str:
    """``2026-12-01 02:47:22Z`` for an ISO 8601 UTC time, or ``-``."""
    if not iso_time:
        return "-"
    return datetime.fromisoformat(iso_time).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


_environment.filters["pretty_json"] = pretty_json
_environment.filters["short_time"] = short_time
_environment.filters["compact_json"] = compact_json


def render(
    request: Request, template: str, context: dict[str, Any], *, status: int = 200
) -> HTMLResponse:
    """Render a page with the shared context: who is signed in, CSRF token, links."""
    dash = dashboard_of(request)
    session = dash.auth.session_of(request)
    now = dash.rl.clock.now()

    def url(name: str, /, **path_params: Any) -> str:
        return request.url_for(name, **path_params).path

    shared = {
        "request": request,
        "environment": dash.rl.environment,
        "read_only": dash.read_only,
        "signed_in": session is not None,
        "csrf_field": CSRF_FIELD,
        "csrf_token": csrf_token(dash.auth, session) if session else "",
        "refresh": dash.refresh,
        "statuses": [status.value for status in RunStatus],
        "nav_pages": NAV_PAGES,
        "url": url,
        "ago": lambda iso_time: relative(iso_time, now),
    }
    body = _environment.get_template(template).render({**shared, **context})
    return HTMLResponse(body, status_code=status)
