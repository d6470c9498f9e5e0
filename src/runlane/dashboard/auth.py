"""The operator token: Bearer checks for the API, signed session cookies for browsers.

The cookie never holds the token. It holds an issue time and a random nonce,
signed with a key derived from the token, so any dashboard process that knows
the token accepts it (the dashboard keeps no state) and changing the token
signs everybody out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field

from starlette.requests import Request

#: Name of the browser session cookie.
SESSION_COOKIE = "runlane_session"
#: How long a browser session lasts, in seconds.
SESSION_LIFETIME = 12 * 60 * 60
_KEY_LABEL = b"runlane-dashboard-session-v1"


@dataclass(frozen=True, slots=True)
class OperatorAuth:
    """Checks the operator token; ``token=None`` makes the dashboard read-only."""

    token: str | None = field(repr=False)

    @property
    def enabled(self) -> bool:
        """Whether actions are possible at all."""
        return self.token is not None

    def token_matches(self, candidate: str | None) -> bool:
        """Constant-time comparison of ``candidate`` with the configured token."""
        if self.token is None or not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def bearer_matches(self, request: Request) -> bool:
        """Whether the request carries ``Authorization: Bearer <token>``."""
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(credentials.strip())

    def new_session(self, now: float | None = None) -> str:
        """A signed session value for a browser that has just proved the token."""
        body = f"{int(now if now is not None else time.time())}.{secrets.token_urlsafe(16)}"
        return f"{body}.{self.sign(body)}"

    def session_of(self, request: Request, now: float | None = None) -> str | None:
        """The request's session cookie when it is validly signed and not expired."""
        value = request.cookies.get(SESSION_COOKIE)
        if self.token is None or not value:
            return None
        body, _, signature = value.rpartition(".")
        issued, _, _nonce = body.partition(".")
        if not issued.isdigit() or not hmac.compare_digest(signature, self.sign(body)):
            return None
        age = (now if now is not None else time.time()) - int(issued)
        return value if 0 <= age < SESSION_LIFETIME else None

    def sign(self, text: str) -> str:
        """HMAC-SHA256 of ``text`` under the key derived from the token."""
        assert self.token is not None, "signing needs a token"
        key = hmac.new(self.token.encode(), _KEY_LABEL, hashlib.sha256).digest()
        return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
