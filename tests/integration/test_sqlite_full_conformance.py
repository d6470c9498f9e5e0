"""The storage conformance suite on a SQLite file at ``synchronous=FULL``.

At FULL every commit waits for the disk, so the driver makes its transactions'
commits in its thread rather than on the event loop: a path of its own, which
the suite run at the default setting never takes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import LaneFactory

from runlane import sqlite_lane
from runlane.testing.conformance.storage import *  # noqa: F403


@pytest.fixture
def lane_factory(tmp_path: Path) -> LaneFactory:
    """Lanes on one SQLite file whose commits are synced to disk."""
    path = tmp_path / "runlane.db"
    return lambda: sqlite_lane(path, synchronous="FULL")
