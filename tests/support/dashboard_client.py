"""A dashboard under test: the seeded app, served in-process through Starlette's TestClient."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from starlette.testclient import TestClient
from tests.support.dashboard_app import Seeded, build_runtime, seed

from runlane import Lane, Run, Runlane
from runlane.dashboard import create_app

T = TypeVar("T")

#: Distinctive, so a test can search every response and log line for it.
TOKEN = "op-token-7c1e9a-never-shown"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class DashboardUnderTest:
    """A client for the dashboard, and a way to read storage behind its back."""

    client: TestClient
    new_runtime: Callable[[], Runlane]
    seeded: Seeded

    def read(self, action: Callable[[Runlane], Awaitable[T]]) -> T:
        """Run ``action`` on a runtime of its own over the same database."""

        async def run() -> T:
            async with self.new_runtime() as rl:
                return await action(rl)

        return asyncio.run(run())

    def runs(self) -> list[Run]:
        """Every run in storage, newest first."""

        async def listing(rl: Runlane) -> list[Run]:
            return (await rl.runs.list(limit=1000)).data

        return self.read(listing)

    def state(self) -> list[tuple[str, str, int]]:
        """(id, status, event sequence) of every run: any change shows up here."""
        return [(run.id, run.status.value, run.event_sequence) for run in self.runs()]

    def sign_in(self, token: str = TOKEN) -> None:
        """Sign in through the form, as a browser would."""
        response = self.client.post("/login", data={"token": token}, follow_redirects=False)
        assert response.status_code == 303, response.text

    def csrf_token(self, page: str = "/") -> str:
        """The CSRF token a signed-in page puts in its forms."""
        match = _CSRF.search(self.client.get(page).text)
        assert match is not None, f"{page} has no CSRF field (not signed in?)"
        return match.group(1)


@contextmanager
def dashboard_under_test(
    tmp_path: Path,
    *,
    lanes: Callable[[], Lane] | None = None,
    environment: str = "default",
    **options: Any,
) -> Iterator[DashboardUnderTest]:
    """Seed the app and serve its dashboard with ``options``: on a SQLite file in
    ``tmp_path``, or on the lanes ``lanes`` builds (one store, a fresh lane per call)."""
    db = tmp_path / "app.db"

    def new_runtime() -> Runlane:
        return build_runtime(lanes() if lanes else db, environment=environment)

    async def prepare() -> Seeded:
        rl = new_runtime()
        await rl.migrate()  # PostgreSQL opens only on a migrated schema
        async with rl:
            return await seed(rl)

    seeded = asyncio.run(prepare())
    rl = new_runtime()
    with TestClient(create_app(rl, **options)) as client:
        try:
            yield DashboardUnderTest(client, new_runtime, seeded)
        finally:
            client.portal.call(rl.close)
