"""What a drained run costs the PostgreSQL server in rows, WAL and disk.

Triggers ``--runs`` no-op runs on a fresh schema (``trigger_many``, then ANALYZE and
CHECKPOINT, as the drain benchmarks do), drains them with one worker of ``--slots``
slots (``WorkerMode.DRAIN``), and prints per run: the rows the drain left in
``runlane_runs`` and ``runlane_run_events``, the WAL it wrote (the difference of
``pg_current_wal_lsn()`` around the drain, full-page images included) and, scaled to
a million runs, the size of each table and of its indexes once drained::

    .venv/bin/python bench/bench_row_cost.py                          # own throwaway server
    .venv/bin/python bench/bench_row_cost.py --runs 10000 --rounds 3 --json
    .venv/bin/python bench/bench_row_cost.py --src /other/checkout/src   # another version
    RUNLANE_BENCH_DATABASE_URL=postgresql://... .venv/bin/python bench/bench_row_cost.py

``--src`` imports Runlane from another checkout's ``src`` (this script uses only the
public API and SQL on the tables, so it runs against older versions too): run it
with and without to compare two versions on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUNS = 10_000
SLOTS = 100
ENVIRONMENT = "bench"
TABLES = ("runlane_runs", "runlane_run_events")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--slots", type=int, default=SLOTS)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--src", help="a checkout's src folder to import runlane from")
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser.parse_args()


async def measure_once(dsn: str, runs: int, slots: int) -> dict[str, Any]:
    """Drain ``runs`` prefilled runs on a fresh schema; what it left and wrote, per run."""
    import psycopg
    from psycopg import sql

    from runlane import Context, Runlane, WorkerMode, postgres_lane, queue, task

    @task("bench.noop")
    async def noop(payload: Any, ctx: Context) -> None:
        """Does nothing: the benchmark measures the rows, not the task."""

    schema = f"runlane_rows_{uuid.uuid4().hex[:8]}"
    rl = Runlane(
        lane=postgres_lane(dsn, schema=schema),
        queues=[queue("bench", default=True)],
        tasks=[noop],
        environment=ENVIRONMENT,
    )
    await rl.migrate()
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            async with rl:
                await rl.trigger_many(noop, [{"n": n} for n in range(runs)])
                await conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, TABLES[0])))
                await conn.execute("CHECKPOINT")
                before = await _lsn(conn)
                worker = rl.worker(concurrency=slots, mode=WorkerMode.DRAIN, handle_signals=False)
                await worker.run()
                wal = await _wal_since(conn, before)
            result: dict[str, Any] = {"wal_bytes_per_run": wal / runs}
            for table in TABLES:
                name = sql.Identifier(schema, table)
                cur = await conn.execute(sql.SQL("SELECT count(*) FROM {}").format(name))
                (count,) = await cur.fetchone() or (0,)
                cur = await conn.execute(
                    "SELECT pg_table_size(%s::regclass), pg_indexes_size(%s::regclass)",
                    (name.as_string(conn), name.as_string(conn)),
                )
                table_bytes, index_bytes = await cur.fetchone() or (0, 0)
                short = table.removeprefix("runlane_")
                result[f"{short}_rows_per_run"] = count / runs
                # Bytes per run are (decimal) megabytes per million runs.
                result[f"{short}_table_mb_per_million"] = table_bytes / runs
                result[f"{short}_index_mb_per_million"] = index_bytes / runs
            done = await conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE status = 'succeeded'").format(
                    sql.Identifier(schema, TABLES[0])
                )
            )
            (succeeded,) = await done.fetchone() or (0,)
            if succeeded != runs:
                raise SystemExit(f"{succeeded} of {runs} runs succeeded")
            return result
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def _lsn(conn: Any) -> str:
    cur = await conn.execute("SELECT pg_current_wal_lsn()::text")
    (lsn,) = await cur.fetchone()
    return str(lsn)


async def _wal_since(conn: Any, lsn: str) -> int:
    cur = await conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (lsn,))
    (diff,) = await cur.fetchone()
    return int(diff)


def main() -> None:
    """Parse options, start a server unless one is given, measure, print."""
    args = _parse()
    if args.src:
        sys.path.insert(0, str(Path(args.src).resolve()))
    sys.path.insert(0, str(ROOT))  # for tests.support
    from tests.support.postgres_server import bench_database

    rounds: list[dict[str, Any]] = []
    with bench_database("runlane_bench") as dsn:
        for _ in range(max(1, args.rounds)):
            rounds.append(asyncio.run(measure_once(dsn, args.runs, args.slots)))
    summary = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    summary["settings"] = {"runs": args.runs, "slots": args.slots, "rounds": len(rounds)}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"drain of {args.runs:,} runs, 1 worker x {args.slots} (medians of {len(rounds)})")
    print(f"WAL per run: {summary['wal_bytes_per_run']:,.0f} bytes")
    for table in TABLES:
        short = table.removeprefix("runlane_")
        print(
            f"{table:20} rows/run {summary[f'{short}_rows_per_run']:.2f}   "
            f"table {summary[f'{short}_table_mb_per_million']:,.0f} MB/M runs   "
            f"indexes {summary[f'{short}_index_mb_per_million']:,.0f} MB/M runs"
        )


if __name__ == "__main__":
    main()
