"""The SQL drivers' statements: whole, named once, in one .sql file per concern."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

from runlane.storage.postgres.queries import QUERY_TEMPLATES
from runlane.storage.sql.queryfiles import load_queries
from runlane.storage.sqlite.queries import QUERIES
from runlane.storage.sqlite.versioning import apply_migrations_for

CLAIMS = ("claim_due_runs", "claim_bounded_runs", "claim_run")


def _package(root: Path, name: str, files: dict[str, str]) -> str:
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for filename, text in files.items():
        (package / filename).write_text(text)
    return name


def test_statements_of_every_sql_file_of_a_package_load_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _package(
        tmp_path,
        "queries_by_concern",
        {
            "runs.sql": "-- Runs.\n\n-- name: get_run\n-- One run.\nSELECT 1;\n",
            "claims.sql": "-- name: claim_run\nSELECT 2\n\n-- name: claim_due_runs\nSELECT 3;\n",
            "notes.txt": "-- name: ignored\nSELECT 4;\n",
        },
    )
    assert load_queries(name) == {
        "claim_run": "SELECT 2",
        "claim_due_runs": "SELECT 3",
        "get_run": "SELECT 1",  # comment lines stay in the file, not on the wire
    }


def test_a_statement_named_twice_across_files_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _package(
        tmp_path,
        "queries_named_twice",
        {"a.sql": "-- name: get_run\nSELECT 1;\n", "b.sql": "-- name: get_run\nSELECT 2;\n"},
    )
    with pytest.raises(RuntimeError, match="'get_run' is named twice"):
        load_queries(name)


def test_a_package_without_named_statements_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _package(tmp_path, "queries_none", {"a.sql": "SELECT 1;\n"})
    with pytest.raises(RuntimeError, match="no named queries"):
        load_queries(name)


@pytest.mark.parametrize(
    ("package", "loaded"),
    [("runlane.storage.sqlite", QUERIES), ("runlane.storage.postgres", QUERY_TEMPLATES)],
)
def test_each_driver_runs_its_statements_exactly_as_its_files_hold_them(
    package: str, loaded: dict[str, str]
) -> None:
    # Nothing is stitched in Python: every claim is whole in the files.
    assert loaded == load_queries(package)
    assert set(CLAIMS) <= set(loaded)


def test_each_sqlite_statement_compiles_as_it_stands() -> None:
    # Whole statements: each can be handed to EXPLAIN against the migrated schema.
    conn = sqlite3.connect(":memory:")
    apply_migrations_for(conn.cursor(), deliveries=True)
    for name, sql in QUERIES.items():
        params: object = (None, None) if "?" in sql else defaultdict(lambda: None)
        try:
            conn.execute(f"EXPLAIN {sql}", params)  # type: ignore[arg-type]
        except sqlite3.Error as error:  # pragma: no cover - the failure names the statement
            pytest.fail(f"{name}: {error}")


def test_sqlite_partial_indexes_name_their_status_sets_without_in_lists() -> None:
    # SQLite evaluates a partial index's WHERE on every row written and builds a
    # temporary table for a constant IN list at each execution: OR chains skip that.
    conn = sqlite3.connect(":memory:")
    apply_migrations_for(conn.cursor(), deliveries=True)
    partial = {
        name: sql.split(" WHERE ", 1)[1]
        for name, sql in conn.execute(
            "SELECT name, replace(sql, char(10), ' ') FROM sqlite_master "
            "WHERE type = 'index' AND sql LIKE '% WHERE %'"
        )
    }
    assert "runlane_runs_claim_order" in partial
    assert {name: where for name, where in partial.items() if " IN (" in where} == {}


@pytest.mark.parametrize(
    ("statement", "index"),
    [
        ("claim_due_runs", "runlane_runs_claim_order"),
        ("claim_bounded_runs", "runlane_runs_claim_order"),
        ("claim_run", "runlane_runs_keyed"),
        ("list_expired_leases", "runlane_runs_leased"),
        ("occupied_capacity", "runlane_runs_leased"),
        ("get_active_singleton_owner", "runlane_runs_singleton"),
        ("count_finished_runs", "runlane_runs_finished"),
        ("undelivered_runs", "runlane_runs_undelivered"),
    ],
)
def test_sqlite_statements_reach_the_partial_indexes_written_for_them(
    statement: str, index: str
) -> None:
    # The planner uses a partial index only when the statement names the index's
    # status set exactly as the index does: an IN list where the index has an OR
    # chain would turn the claim into a table scan without failing anything else.
    conn = sqlite3.connect(":memory:")
    apply_migrations_for(conn.cursor(), deliveries=True)
    sql = QUERIES[statement]
    params: object = (None, None) if "?" in sql else defaultdict(lambda: None)
    plan = conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()  # type: ignore[arg-type]
    assert any(f"INDEX {index} " in row[3] for row in plan), plan


@pytest.mark.parametrize("cursor", [None, "r5"])
def test_sqlite_list_runs_bounds_its_page_on_the_primary_key_with_or_without_a_cursor(
    cursor: str | None,
) -> None:
    # One statement for every filter and cursor; the cursor stays an index range, so a
    # deep page does not read every newer run of the environment first.
    conn = sqlite3.connect(":memory:")
    apply_migrations_for(conn.cursor(), deliveries=True)
    params = {"environment": "e", "cursor": cursor, "limit": 3, "group_id": None}
    params |= {name: '["x"]' for name in ("statuses", "task_ids", "queues")}
    plan = conn.execute(f"EXPLAIN QUERY PLAN {QUERIES['list_runs']}", params).fetchall()
    assert "(environment=? AND id<?)" in plan[0][3]


def test_a_loaded_statement_drops_comment_lines_and_indentation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    text = (
        "-- name: pick\n-- Why this statement exists.\nSELECT a,\n       'x -- y'\n\n"
        "    -- a note inside\n  FROM t -- trailing stays\n WHERE b = 1;\n"
    )
    name = _package(tmp_path, "compact_queries", {"one.sql": text})
    assert load_queries(name) == {
        "pick": "SELECT a,\n'x -- y'\nFROM t -- trailing stays\nWHERE b = 1"
    }
