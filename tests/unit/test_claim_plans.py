"""The plan of SQLite's claim: each queue's runs are read from the claim-order index
(due time less the priority offset, then id) in order, from its start up to the
horizon, and the read stops at the claim's limit: no sort of the queue's runs,
whatever priorities they mix."""

from __future__ import annotations

import sqlite3
from collections import defaultdict

from runlane.storage.sqlite.queries import QUERIES
from runlane.storage.sqlite.versioning import apply_migrations_for


def _plan(statement: str) -> list[tuple[int, int, str]]:
    # The schema as the lane makes it: the lane never runs ANALYZE, so this is the plan
    # every file gets.
    conn = sqlite3.connect(":memory:")
    apply_migrations_for(conn.cursor(), deliveries=True)
    rows = conn.execute(f"EXPLAIN QUERY PLAN {QUERIES[statement]}", defaultdict(lambda: None))
    return [(node, parent, detail) for node, parent, _, detail in rows]


def test_the_claim_reads_each_queue_in_claim_order_from_the_index_without_sorting() -> None:
    plan = _plan("claim_due_runs")
    search = (
        "SEARCH runlane_runs USING INDEX runlane_runs_claim_order "
        "(environment=? AND queue=? AND claim_at<?)"
    )
    reads = [(node, parent) for node, parent, detail in plan if detail == search]
    assert len(reads) == 1, plan
    (_, scan_of_queue) = reads[0]
    # Nothing under the queue's read sorts: the index gives its order, so the read
    # stops at the limit instead of sorting every due run.
    sorts_there = [d for _, parent, d in plan if parent == scan_of_queue and "TEMP B-TREE" in d]
    assert sorts_there == [], plan
    assert not any("runlane_runs_claimable" in detail for _, _, detail in plan), plan


def test_a_keys_claim_reads_its_runs_in_claim_order_from_its_index_without_sorting() -> None:
    plan = _plan("due_rate_keyed_runs")
    search = (
        "SEARCH runlane_runs USING INDEX runlane_runs_rate_claim_order "
        "(environment=? AND queue=? AND rate_key=? AND claim_at<?)"
    )
    assert [detail for _, _, detail in plan] == [search], plan


def test_a_keys_earliest_due_time_is_read_from_its_run_at_index() -> None:
    plan = _plan("settle_rate_partition")
    details = [detail for _, _, detail in plan]
    # min(run_at) of the key's waiting runs, for due_at and ready_at: the run_at-ordered
    # index, not the claim-order one (whose first entry is not the earliest due).
    seeks = [d for d in details if "runlane_runs_rate_keyed" in d]
    assert len(seeks) == 2 and all("rate_key=?" in d for d in seeks), plan
    assert not any("TEMP B-TREE" in d or d.startswith("SCAN") for d in details), plan
