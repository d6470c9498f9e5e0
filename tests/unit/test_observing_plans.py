"""The plans of the SQLite statements that observe runs: the throughput charts read a
range of the rollup's keys, and a progress write finds each run by primary key, however
many runs the file holds."""

from __future__ import annotations

import sqlite3

import pytest

from runlane.storage.sqlite.queries import QUERIES
from runlane.storage.sqlite.versioning import apply_migrations_for


def _plan(statement: str, params: dict[str, object]) -> list[str]:
    # The schema as the lane makes it: the lane never runs ANALYZE, so these are the
    # plans every file gets.
    conn = sqlite3.connect(":memory:")
    apply_migrations_for(conn.cursor(), deliveries=False)
    return [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {QUERIES[statement]}", params)]


READ = {"environment": "e", "since": 0, "bucket": 60_000_000, "queue": "main"}


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("read_queue_throughput", "SEARCH runlane_throughput USING PRIMARY KEY "
         "(environment=? AND queue=? AND minute>?)"),
        ("read_throughput", "SEARCH runlane_throughput USING INDEX "
         "runlane_throughput_by_minute (environment=? AND minute>?)"),
    ],
)  # fmt: skip
def test_throughput_reads_search_a_range_of_the_rollup(statement: str, expected: str) -> None:
    plan = _plan(statement, READ)
    assert plan[0] == expected, plan


def test_a_progress_write_finds_each_run_by_primary_key() -> None:
    plan = _plan("write_progress", {"environment": "e", "writes": "[]", "now": 0})
    assert plan == [
        "MATERIALIZE w",
        "SCAN json_each VIRTUAL TABLE INDEX 1:",
        "SEARCH r USING INDEX sqlite_autoindex_runlane_runs_1 (environment=? AND id=?)",
        "SCAN w",
        "SEARCH runlane_runs USING INTEGER PRIMARY KEY (rowid=?)",
    ], plan
