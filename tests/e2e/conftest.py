"""Fixtures for end-to-end tests: the ``runlane`` command run as a real subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.e2e.runner import APP_MODULE, Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """``runlane`` run in a folder holding ``app.py`` (``app:rl``, factory ``app:build``)."""
    (tmp_path / "app.py").write_text(APP_MODULE)
    return Cli(tmp_path)
