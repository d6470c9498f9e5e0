"""The SQLite claim statements return the columns a run is built from, each once."""

from __future__ import annotations

import pytest

from runlane.storage.sql.rows import RUN_COLUMNS
from runlane.storage.sqlite.queries import QUERIES


@pytest.mark.parametrize("name", ["claim_due_runs", "claim_bounded_runs", "claim_run"])
def test_a_claim_returns_exactly_the_run_columns(name: str) -> None:
    # The three RETURNING lists are written out in full (a RETURNING * would hand
    # sqlite3 the bookkeeping columns too): each must still name every run column.
    returning = QUERIES[name].rsplit("RETURNING", 1)[1]
    columns = [column.strip(" \n;") for column in returning.split(",")]
    assert sorted(columns) == sorted(RUN_COLUMNS)
