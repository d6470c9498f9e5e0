"""Numbered statements: the hot SQLite statements bound by position do what the named
text says."""

from __future__ import annotations

import re
import sqlite3

import pytest

from runlane.storage.sqlite.queries import NUMBERED, QUERIES, Numbered


def test_names_become_qmarks_in_order_and_repeats_are_bound_again() -> None:
    numbered = Numbered("UPDATE t SET a = :a, b = :b WHERE (:b IS NULL OR c = :c) AND a = :a")
    assert numbered.sql == "UPDATE t SET a = ?, b = ? WHERE (? IS NULL OR c = ?) AND a = ?"
    assert numbered.names == ("a", "b", "b", "c", "a")
    assert numbered.values({"c": 3, "a": 1, "b": 2, "unused": 0}) == (1, 2, 2, 3, 1)
    assert Numbered("SELECT :only").values({"only": 7}) == (7,)


@pytest.mark.parametrize("name", sorted(NUMBERED))
def test_every_placeholder_is_nameless(name: str) -> None:
    # Python 3.12+ takes ?1 for a named placeholder: bound from a sequence, it warns
    # once per parameter and statement run (and is to be refused later).
    sql = NUMBERED[name].sql
    assert re.search(r"\?\d", sql) is None
    assert sql.count("?") == len(NUMBERED[name].names)


def test_quoted_text_is_refused() -> None:
    with pytest.raises(ValueError):
        Numbered("SELECT ':not_a_parameter', :a")


@pytest.mark.parametrize("name", sorted(NUMBERED))
def test_the_hot_statements_keep_every_parameter(name: str) -> None:
    numbered = NUMBERED[name]
    named = QUERIES[name]
    assert set(numbered.names) == {part.split()[0].strip("(),;") for part in named.split(":")[1:]}
    assert ":" not in numbered.sql


#: The settle's compare-and-set on a bare copy of the columns it reads and writes.
SETTLED_COLUMNS = (
    "environment, id, status, run_at, result, failure, cancel_reason, failure_count, "
    "replays, dead_letter_reason, dead_lettered_at, event_sequence, updated_at, "
    "delivery_requested_at, lease_owner, lease_token, lease_expires_at, has_dependents, "
    "attempt, started_sequence, started_at, started_by, started_lease_expires_at, "
    "succeeded_sequence, succeeded_at, progress"
)
SETTLE = {
    "environment": "e", "id": "r", "status": "succeeded", "run_at": None,
    "result": "1", "failure": None, "cancel_reason": None, "reset_failures": 0,
    "add_failure": 0, "replays": None, "dead_letter_reason": None,
    "dead_lettered_at": None, "event_count": 1, "now": 5, "keep_lease": 0,
    "expected_sequence": 2, "lease_token": "t", "lease_expired_by": None,
    "settles_alone": 1, "succeeded_attempt": 1,
}  # fmt: skip
PROGRESS = {"progress": '[1,1.0,"done",{"pages":4},5]'}


@pytest.mark.parametrize(
    ("statement", "params", "progress"),
    [
        # Without progress, the value written while the attempt ran stays.
        ("apply_transition", SETTLE, '[1,0.5,"half",null,3]'),
        ("apply_progress_transition", {**SETTLE, **PROGRESS}, '[1,1.0,"done",{"pages":4},5]'),
    ],
)
def test_numbered_and_named_forms_change_the_same_rows(
    statement: str, params: dict[str, object], progress: str
) -> None:
    rows = []
    for form in ("named", "numbered"):
        conn = sqlite3.connect(":memory:")
        conn.execute(f"CREATE TABLE runlane_runs ({SETTLED_COLUMNS})")
        conn.execute(
            "INSERT INTO runlane_runs VALUES ('e', 'r', 'running', 1, NULL, NULL, NULL, 0, 0,"
            " NULL, NULL, 2, 1, NULL, 'w', 't', 9, 0, 1, 2, 1, 'w', 9, NULL, NULL,"
            " '[1,0.5,\"half\",null,3]')"
        )
        if form == "named":
            changed = len(conn.execute(QUERIES[statement], params).fetchall())
        else:
            settle = NUMBERED[statement]
            changed = len(conn.execute(settle.sql, settle.values(params)).fetchall())
        rows.append((changed, conn.execute("SELECT * FROM runlane_runs").fetchall()))
        conn.close()
    assert rows[0] == rows[1]
    assert rows[0][0] == 1 and rows[0][1][0][2] == "succeeded"
    # The success is kept on the row: at the next sequence, at the settle's time.
    assert rows[0][1][0][-3:-1] == (3, 5)
    assert rows[0][1][0][-1] == progress


def test_the_settle_with_progress_is_the_plain_settle_and_the_progress_column() -> None:
    plain = QUERIES["apply_transition"]
    with_progress = QUERIES["apply_progress_transition"]
    progress = ",\nprogress = :progress\nWHERE "
    assert progress in with_progress
    assert with_progress.replace(progress, "\nWHERE ", 1) == plain
