"""Cross-site request forgery defences for browser forms.

Three layers, all required for a form POST: the session cookie is
``SameSite=Strict``; the request must come from this origin (``Origin`` and
``Sec-Fetch-Site`` headers, which browsers set and pages cannot forge); and the
form carries a CSRF token bound to the session (field ``csrf_token``, or header
``X-CSRF-Token`` for htmx).
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from starlette.requests import Request

from runlane.dashboard.auth import OperatorAuth

#: Form field and header carrying the CSRF token.
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"


def csrf_token(auth: OperatorAuth, session: str) -> str:
    """The CSRF token of one session (an HMAC of it: no server-side state)."""
    return auth.sign(f"csrf:{session}")


def csrf_matches(auth: OperatorAuth, session: str, submitted: str | None) -> bool:
    """Whether ``submitted`` is the CSRF token of ``session``."""
    if not submitted:
        return False
    return hmac.compare_digest(submitted.encode(), csrf_token(auth, session).encode())


def is_same_origin(request: Request) -> bool:
    """False for a request a browser marks as coming from another site or origin."""
    if request.headers.get("sec-fetch-site", "").lower() in ("cross-site", "same-site"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True  # non-browser clients and older browsers; the CSRF token still applies
    host = request.headers.get("host", "")
    return origin != "null" and urlsplit(origin).netloc.lower() == host.lower()
