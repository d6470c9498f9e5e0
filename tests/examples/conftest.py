"""Fixtures for the examples' tests: each example runs for real, against real servers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.support.postgres_server import PostgresServer

#: The examples folder at the root of the repository.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: Seconds a command of an example may take before its test fails.
COMMAND_TIMEOUT = 120


@pytest.fixture(scope="module")
def example_database(
    request: pytest.FixtureRequest, postgres_server: PostgresServer | None, postgres_dsn: str
) -> str:
    """A fresh, empty database for one example's tests.

    With RUNLANE_TEST_DATABASE_URL naming a server, the shared test database instead.
    """
    if postgres_server is None:
        return postgres_dsn
    name = request.path.stem.removeprefix("test_")
    return postgres_server.create_database(name)


@contextmanager
def example_on_path(name: str, **environ: str) -> Iterator[Path]:
    """Make ``examples/<name>`` importable (as it is from its own folder), with ``environ`` set.

    Its modules are forgotten afterwards, so examples never see each other's.
    """
    root = EXAMPLES / name
    saved = {key: os.environ.get(key) for key in environ}
    known = set(sys.modules)
    os.environ.update(environ)
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for module in set(sys.modules) - known:
            if getattr(sys.modules[module], "__file__", None) and str(root) in str(
                sys.modules[module].__file__
            ):
                del sys.modules[module]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_in_example(folder: Path, *args: str, env: dict[str, str]) -> str:
    """Run a command in an example's folder as a user would; its stdout, or a failed test
    that shows what it printed."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=folder,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout
