"""What the partial indexes' status sets cost SQLite per row written (migration 008).

SQLite evaluates a partial index's WHERE on every row a statement inserts, updates
or deletes, and codes a constant ``IN (...)`` list as a temporary table it fills at
each execution of the statement. Migration 008 rewrote the sets as OR chains. This
times, on two copies of one file that differ only in that form of the indexes:

* settle: the driver's own ``apply_transition`` statement, one per run (RUNNING to
  SUCCEEDED), 10 runs per transaction, as a worker with 10 slots settles;
* trigger: one ``insert_plain_run`` per transaction, as a lone trigger writes.

Rounds alternate between the two forms and the medians are printed, with the ratio.

    .venv/bin/python bench/bench_sqlite_status_sets.py
    .venv/bin/python bench/bench_sqlite_status_sets.py --runs 20000 --rounds 7
"""

from __future__ import annotations

import argparse
import re
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from runlane.storage.sqlite.queries import QUERIES
from runlane.storage.sqlite.versioning import apply_migrations

ENVIRONMENT = "bench"
SOURCE = '{"type":"trigger"}'
OR_CHAIN = re.compile(r"\((\w+ = '[a-z_]+'(?:\s+OR \w+ = '[a-z_]+')+)\)")


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def as_in_lists(conn: sqlite3.Connection) -> int:
    """Rebuild every partial index whose WHERE has an OR chain with an IN list instead
    (the form before migration 008); return how many were rebuilt."""

    def in_list(match: re.Match[str]) -> str:
        terms = [term.split(" = ") for term in re.split(r"\s+OR\s+", match.group(1))]
        return f"{terms[0][0]} IN ({', '.join(value for _, value in terms)})"

    rebuilt = 0
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql LIKE '% OR %'"
    ).fetchall()
    for name, sql in indexes:
        conn.execute(f"DROP INDEX {name}")
        conn.execute(OR_CHAIN.sub(in_list, sql))
        rebuilt += 1
    return rebuilt


def _trigger_params(run_id: str) -> dict[str, object]:
    return {
        "environment": ENVIRONMENT,
        "id": run_id,
        "task_id": "bench.noop",
        "queue": "main",
        "status": "queued",
        "payload": '{"i":1}',
        "run_at": 1,
        "now": 1,
        "event_sequence": 1,
        "delivery_requested_at": None,
        "source": SOURCE,
        "concurrency_key": None,
        "trace_carrier": None,
    }


def _settle_params(run_id: str) -> dict[str, object]:
    return {
        "environment": ENVIRONMENT,
        "id": run_id,
        "status": "succeeded",
        "run_at": None,
        "result": None,
        "failure": None,
        "cancel_reason": None,
        "add_failure": 0,
        "reset_failures": 0,
        "replays": None,
        "dead_letter_reason": None,
        "dead_lettered_at": None,
        "event_count": 1,
        "now": 2,
        "keep_lease": 0,
        "expected_sequence": 2,
        "lease_token": "token",
        "lease_expired_by": None,
    }


def prepare(path: Path, runs: int) -> list[str]:
    """A migrated file with ``runs`` runs RUNNING under one lease; their ids."""
    conn = _connect(path)
    with conn:
        apply_migrations(conn.cursor())
    ids = [f"run-{n:08d}" for n in range(runs)]
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(QUERIES["insert_plain_run"], [_trigger_params(i) for i in ids])
    conn.execute(
        "UPDATE runlane_runs SET status = 'running', attempt = 1, event_sequence = 2, "
        "lease_owner = 'worker', lease_token = 'token', lease_expires_at = 9"
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return ids


def settle(conn: sqlite3.Connection, ids: list[str]) -> float:
    """Microseconds per run to settle ``ids``, 10 per transaction."""
    query = QUERIES["apply_transition"]
    started = time.perf_counter()
    for start in range(0, len(ids), 10):
        conn.execute("BEGIN IMMEDIATE")
        for run_id in ids[start : start + 10]:
            if conn.execute(query, _settle_params(run_id)).rowcount != 1:
                raise SystemExit(f"run {run_id} was not settled")
        conn.execute("COMMIT")
    return (time.perf_counter() - started) * 1e6 / len(ids)


def trigger(conn: sqlite3.Connection, count: int) -> float:
    """Microseconds per lone trigger's insert, one transaction each."""
    query = QUERIES["insert_plain_run"]
    started = time.perf_counter()
    for n in range(count):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(query, _trigger_params(f"new-{n:08d}"))
        conn.execute("COMMIT")
    return (time.perf_counter() - started) * 1e6 / count


def one_round(base: Path, ids: list[str], in_lists: bool, work: str) -> float:
    copy = base.with_name(f"copy-{'in' if in_lists else 'or'}.db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{copy}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(base, copy)
    conn = _connect(copy)
    if in_lists and not as_in_lists(conn):
        raise SystemExit("no partial index with an OR chain: is migration 008 applied?")
    measure: Callable[[], float] = (
        (lambda: settle(conn, ids)) if work == "settle" else (lambda: trigger(conn, len(ids)))
    )
    try:
        return measure()
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder) / "base.db"
        ids = prepare(base, args.runs)
        print(f"SQLite {sqlite3.sqlite_version}, {args.runs:,} runs, {args.rounds} rounds")
        print(f"{'statement':<10} {'IN lists us/run':>16} {'OR chains us/run':>17} {'ratio':>6}")
        for work in ("settle", "trigger"):
            timings: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.rounds):
                for in_lists in (True, False):
                    timings[in_lists].append(one_round(base, ids, in_lists, work))
            before, after = (statistics.median(timings[flag]) for flag in (True, False))
            print(f"{work:<10} {before:>16.1f} {after:>17.1f} {after / before:>6.2f}")


if __name__ == "__main__":
    main()
