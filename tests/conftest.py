"""Shared fixtures: a runtime on each storage driver, against real servers."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from tests.support.postgres_server import PostgresServer, PostgresUnavailable, postgres_missing

from runlane import Lane, postgres_lane, sqlite_lane
from runlane.storage.postgres import PostgresStorage

# A pytest-xdist worker has a terminal's COLUMNS and LINES (80 x 24) in its environment;
# the commands these tests start write to pipes, and their output and logs are read
# whole, as they are under a single pytest process.
if "PYTEST_XDIST_WORKER" in os.environ:
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)

#: ``pytester`` runs users' test files against the runlane pytest plugin.
pytest_plugins = ["pytester"]

DRIVERS = ["sqlite", "postgres"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | None]:
    """A throwaway cluster, or ``None`` when RUNLANE_TEST_DATABASE_URL names a server."""
    if os.environ.get("RUNLANE_TEST_DATABASE_URL"):
        yield None
        return
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as error:
        postgres_missing(error.reason)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer | None) -> str:
    """One migrated database for the session; tests isolate by environment name."""
    external = os.environ.get("RUNLANE_TEST_DATABASE_URL")
    if external:
        return external
    assert postgres_server is not None
    return postgres_server.create_database("runlane_test")


@pytest.fixture
async def postgres_storage(postgres_dsn: str) -> AsyncIterator[PostgresStorage]:
    """A migrated, open PostgreSQL driver on the session's database."""
    storage = postgres_lane(postgres_dsn).storage
    assert isinstance(storage, PostgresStorage)
    await storage.migrate()
    await storage.open()
    yield storage
    await storage.close()


@pytest.fixture
def environment() -> str:
    """A fresh environment name: runs of other tests are invisible to this one."""
    return f"test-{uuid.uuid4().hex[:12]}"


LaneFactory = Callable[[], Lane]


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    """The storage driver under test."""
    return str(request.param)


@pytest.fixture
def lane_factory(driver: str, tmp_path: Path, request: pytest.FixtureRequest) -> LaneFactory:
    """Builds lanes that all point at the same store (one per runtime under test)."""
    if driver == "sqlite":
        path = tmp_path / "runlane.db"
        return lambda: sqlite_lane(path)
    dsn = request.getfixturevalue("postgres_dsn")
    return lambda: postgres_lane(dsn)


#: Set by the eager stage of ``./dev test`` (the worker's tests on Python 3.12+).
EAGER_STAGE = os.environ.get("RUNLANE_TEST_EAGER_STAGE") == "1"


class EagerGuards:
    """In the eager stage, the ``eager_start`` tests must pass: a skip, or none run at
    all, fails the session, so the stage cannot go green without the eager path.

    Counted from the reports (on the controller under pytest-xdist, which gets every
    worker's), not from the items, which a controller does not run."""

    def __init__(self) -> None:
        self.passed = 0
        self.skipped: list[str] = []
        self.failure = ""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "eager_start" not in report.keywords:
            return
        if report.skipped:
            self.skipped.append(report.nodeid)
        elif report.when == "call" and report.passed:
            self.passed += 1

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # a pytest-xdist worker: the controller decides
        if self.skipped:
            self.failure = f"eager_start tests were skipped: {', '.join(self.skipped)}"
        elif not self.passed:
            self.failure = "no eager_start test passed"
        if self.failure:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.failure:
            terminalreporter.write_sep("=", "eager stage failed", red=True)
            terminalreporter.write_line(self.failure)


def pytest_configure(config: pytest.Config) -> None:
    if EAGER_STAGE:
        config.pluginmanager.register(EagerGuards(), "runlane-eager-guards")
