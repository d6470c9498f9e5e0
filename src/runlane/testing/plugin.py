"""The pytest plugin installed with runlane (entry point ``pytest11``: ``runlane``).

Fixtures:

- ``runlane_runtime``: your app's runtime, on a throwaway SQLite file and a
  :class:`~runlane.ManualClock` for the test, restored and closed afterwards. Tell it
  where your runtime is with ``runlane_app = "myapp.jobs:rl"`` under
  ``[tool.pytest.ini_options]`` (or ``$RUNLANE_APP``), or override ``runlane_app``.
- ``runlane_factory``: builds runtimes from queues and tasks on that same throwaway
  file and clock, for libraries and tests that have no app runtime.
- ``runlane_clock``: the manual clock; ``runlane_clock.advance("5m")`` moves time.
- ``runlane_app``: the runtime ``runlane_runtime`` starts from.

Importing this module imports no database driver and no AWS SDK.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from runlane.core.runtime import Runlane
from runlane.lanes import sqlite_lane
from runlane.model.definitions import TaskDef
from runlane.model.queue_defs import QueueDef
from runlane.operator.loading import APP_ENV_VAR, load_runtime
from runlane.testing.rebinding import on_lane
from runlane.types.clock import ManualClock
from runlane.types.errors import configuration_error

#: The ini option that names the app's runtime, as ``module:attribute``.
APP_INI_OPTION = "runlane_app"
#: The throwaway database's file name, in a fresh temporary directory per test.
TEST_DATABASE = "runlane-test.db"

RuntimeFactory = Callable[..., Runlane]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``runlane_app`` ini option."""
    parser.addini(
        APP_INI_OPTION,
        "import path (module:attribute) of the Runlane runtime the runlane_runtime "
        f"fixture puts on a test lane; ${APP_ENV_VAR} when unset",
        default="",
    )


@pytest.fixture
def runlane_clock() -> ManualClock:
    """A clock that moves only when told to: ``runlane_clock.advance("5m")``.

    It starts at 2030-01-01 00:00 UTC, so times in assertions are exact.
    """
    return ManualClock()


@pytest.fixture
def runlane_app(request: pytest.FixtureRequest) -> Runlane:
    """Your app's runtime, found by the ``runlane_app`` ini option or ``$RUNLANE_APP``.

    Override this fixture to hand it over directly::

        @pytest.fixture
        def runlane_app():
            from myapp.jobs import rl
            return rl
    """
    import_path = str(request.config.getini(APP_INI_OPTION) or os.environ.get(APP_ENV_VAR, ""))
    if not import_path:
        raise configuration_error(
            "runlane_runtime does not know your runtime: set runlane_app = "
            '"myapp.jobs:rl" under [tool.pytest.ini_options] (or $RUNLANE_APP), '
            "or override the runlane_app fixture to return it."
        )
    return load_runtime(import_path)


@pytest.fixture
def runlane_runtime(
    runlane_app: Runlane, runlane_clock: ManualClock, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runlane]:
    """Your app's runtime on a fresh SQLite file and ``runlane_clock`` for this test.

    It is the same object your code imports, so views, endpoints and tasks that
    trigger through it write to the test lane. Use it with ``await`` in async tests
    or through ``rl.sync`` (and :mod:`runlane.testing.sync`) in sync ones.
    """
    lane = sqlite_lane(tmp_path_factory.mktemp("runlane") / TEST_DATABASE)
    with on_lane(runlane_app, lane, clock=runlane_clock) as rl:
        try:
            yield rl
        finally:
            close_runtime(rl)


@pytest.fixture
def runlane_factory(
    runlane_clock: ManualClock, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RuntimeFactory]:
    """Build runtimes from queues and tasks on one fresh SQLite file and ``runlane_clock``.

    Runtimes built in one test share the file, as processes of one app share a
    database. Keyword options go to :class:`~runlane.Runlane`.

    >>> rl = runlane_factory(queues=[queue("main", default=True)], tasks=[send_welcome])
    """
    path = tmp_path_factory.mktemp("runlane") / TEST_DATABASE
    built: list[Runlane] = []

    def build(
        *,
        queues: Sequence[QueueDef],
        tasks: Sequence[TaskDef[Any]],
        **options: Any,
    ) -> Runlane:
        options.setdefault("clock", runlane_clock)
        runtime = Runlane(lane=sqlite_lane(path), queues=queues, tasks=tasks, **options)
        built.append(runtime)
        return runtime

    try:
        yield build
    finally:
        for runtime in built:
            close_runtime(runtime)


def close_runtime(rl: Runlane) -> None:
    """Close ``rl`` after a test, however the test used it.

    Through ``rl.sync`` it closes on that loop; opened from the test's own event loop
    (which has finished by now), it closes on a new one, which SQLite allows.
    """
    rl.sync.close()
    if rl.is_open:
        asyncio.run(rl.close())
