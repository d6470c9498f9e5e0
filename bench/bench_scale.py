"""PostgreSQL at scale: claim and trigger beside an empty table, pruning, sizes, worker RSS.

One run of this script measures, on one server:

1. **empty**: in a fresh schema, the median and p95 of an idle worker's claim of
   one run (``claim_due_runs`` with limit 1, as ``bench_instructions``' ``pg-claim``
   does) over ``--claims`` claims, and of a lone ``rl.trigger`` over ``--triggers``
   calls;
2. **fill**: in another fresh schema, ``--finished`` finished runs with their
   history, then 100,000 due runs (``trigger_many``). The finished runs are what
   the tree under test itself writes: ``--sample`` runs are triggered and drained
   by a real worker, then their rows (the run, its events and every other row of
   a table with a ``run_id`` column that holds some) are copied server-side with
   ``INSERT ... SELECT`` over ``generate_series``, each copy with new UUIDv7 ids
   and its times moved back, the copies spread over the last 30 days. So the
   columns, indexes and event rows are whatever the tree writes. Then ``VACUUM
   ANALYZE``, as an operator would after a bulk load (autovacuum stays on);
3. **filled**: the same claim and trigger timings again, ``--rounds`` turns of
   the empty table (the schema of step 1, still there) and the filled one, so that
   a swing of the shared machine's load falls on both (which goes first alternates);
   the ratio filled/empty of the pooled samples (the goal is at most 1.5x), and the
   sequential scans of the large tables meanwhile (none is expected); then, in
   turns too, ``rl.queue_stats()`` on both (what a metrics scrape and the
   dashboard's overview read; no goal: it counts every run, finished ones too);
4. **sizes** of every table holding rows (heap, indexes, total), also per million
   runs in the table;
5. **pruning**: ``rl.runs.prune`` of the finished runs older than 27 days (the
   oldest tenth of the fill), in runs deleted per second (goal: at least 50,000/s);
6. **RSS**: ``--drain`` more runs are triggered and one DRAIN worker process
   (``--concurrency`` slots) executes them on the filled table, sampling its own
   ``VmRSS`` once the runs executed reach 10 %, 50 % and 100 % of ``--drain``
   (goal: the last within 10 % of the first).

    .venv/bin/python bench/bench_scale.py                       # 10M finished, 1M drained
    .venv/bin/python bench/bench_scale.py --finished 200000 --drain 50000 --json
    .venv/bin/python bench/bench_scale.py --src ../other-checkout/src   # another tree
    RUNLANE_BENCH_DATABASE_URL=postgresql://... .venv/bin/python bench/bench_scale.py

Without ``RUNLANE_BENCH_DATABASE_URL`` the script starts a throwaway server
(``fsync=on``, ``shared_buffers=128MB``) in ``/tmp``; the full fill needs about
15 GB of disk there. ``--src`` puts another checkout's ``src`` first on the path
(of this process and of the worker child), to compare trees. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any


def _early_src() -> str | None:
    """``--src``, read before runlane is imported so that it is the one imported."""
    for i, arg in enumerate(sys.argv):
        if arg == "--src" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if arg.startswith("--src="):
            return arg.split("=", 1)[1]
    return None


SRC = _early_src()
if SRC:
    sys.path.insert(0, str(Path(SRC).resolve()))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from tests.support.postgres_server import bench_database  # noqa: E402

from runlane import Context, Runlane, WorkerMode, postgres_lane, queue, task  # noqa: E402
from runlane.ports.storage import LeaseRequest  # noqa: E402

ENVIRONMENT = "bench"
DEFAULT_FINISHED = 10_000_000
DEFAULT_DUE = 100_000
DEFAULT_DRAIN = 1_000_000
DEFAULT_SAMPLE = 1_000
DEFAULT_CLAIMS = 500
DEFAULT_TRIGGERS = 1_000
WARMUP = 20
#: ``rl.queue_stats()`` calls per table and round (after the claim and trigger turns).
STATS_CALLS = 3
#: The finished runs' updated_at spread evenly over this many days before now.
SPREAD_DAYS = 30
#: Pruning takes the finished runs older than this: the oldest tenth of the spread.
PRUNE_OLDER_THAN_DAYS = 27
#: Runs copied per INSERT statement while filling.
FILL_ROWS_PER_STATEMENT = 200_000
#: The drain worker's RSS is taken when it has executed these shares of --drain.
RSS_MARKS = (0.1, 0.5, 1.0)
RSS_POLL_SECONDS = 0.2
TRIGGER_BATCH = 10_000

bench_queue = queue("bench", default=True)


@task("bench.noop")
async def noop(payload: Any, ctx: Context) -> None:
    """Does nothing: the benchmark measures the runtime and the table, not the task."""


@contextlib.asynccontextmanager
async def _runtime(dsn: str, schema: str, **options: Any) -> AsyncIterator[Runlane]:
    rl = Runlane(
        lane=postgres_lane(dsn, schema=schema, **options),
        queues=[bench_queue],
        tasks=[noop],
        environment=ENVIRONMENT,
    )
    await rl.migrate()
    async with rl:
        yield rl


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return {"median_ms": statistics.median(ordered) * 1000, "p95_ms": p95 * 1000}


async def _trigger_many(rl: Runlane, runs: int) -> None:
    for start in range(0, runs, TRIGGER_BATCH):
        count = min(TRIGGER_BATCH, runs - start)
        await rl.trigger_many(noop, [{"n": n} for n in range(start, start + count)])


# -- claim and trigger ---------------------------------------------------------------


async def claim_times(rl: Runlane, claims: int) -> list[float]:
    """Seconds of each of ``claims`` idle-worker claims of one due run (after a warm-up)."""
    policies = [rl.registry.queue_policies[0]]
    timings: list[float] = []
    for n in range(WARMUP + claims):
        now = rl.clock.now()
        # A long lease: the claimed runs stay out of the way of the drain that follows.
        lease = LeaseRequest("bench-scale", now + timedelta(hours=6))
        started = time.perf_counter()
        claimed = await rl.storage.claim_due_runs(rl.environment, policies, 1, lease, now)
        took = time.perf_counter() - started
        if len(claimed) != 1:
            raise SystemExit(f"claimed {len(claimed)} runs, not 1")
        if n >= WARMUP:
            timings.append(took)
    return timings


async def trigger_times(rl: Runlane, triggers: int) -> list[float]:
    """Seconds of each of ``triggers`` awaited lone ``trigger`` calls (after a warm-up)."""
    timings: list[float] = []
    for n in range(WARMUP + triggers):
        started = time.perf_counter()
        await rl.trigger(noop, {"n": n})
        took = time.perf_counter() - started
        if n >= WARMUP:
            timings.append(took)
    return timings


async def stats_times(rl: Runlane, calls: int) -> list[float]:
    """Seconds of each of ``calls`` ``rl.queue_stats()`` calls (what a metrics scrape or
    the dashboard's overview reads: counts per queue and status, finished ones too)."""
    timings: list[float] = []
    for _ in range(calls):
        started = time.perf_counter()
        await rl.queue_stats()
        timings.append(time.perf_counter() - started)
    return timings


async def measure_calls(rl: Runlane, claims: int, triggers: int) -> dict[str, Any]:
    """Claim and lone-trigger timings on the table as it is (due runs must be waiting)."""
    return {
        "claim": _ms(await claim_times(rl, claims)),
        "trigger": _ms(await trigger_times(rl, triggers)),
    }


# -- fill -------------------------------------------------------------------------------


def _columns(conn: psycopg.Connection[Any], schema: str, table: str) -> list[tuple[str, str]]:
    """(name, type) of ``table``'s columns that an INSERT may set, in order."""
    rows = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s AND is_identity = 'NO' "
        "AND is_generated = 'NEVER' AND coalesce(column_default, '') NOT LIKE 'nextval(%%' "
        "ORDER BY ordinal_position",
        (schema, table),
    ).fetchall()
    return [(name, kind) for name, kind in rows]


def _copy_select(columns: list[tuple[str, str]], id_column: str) -> sql.Composable:
    """The select list of one copy: ``id_column`` gets a new UUIDv7 made from the
    sample run's id, its moved creation time and the copy number; times move back."""
    new_id = sql.SQL(
        "(substr(lpad(to_hex((s.created_at - sh.us) / 1000), 12, '0'), 1, 8) || '-' || "
        "substr(lpad(to_hex((s.created_at - sh.us) / 1000), 12, '0'), 9, 4) || '-7' || "
        "substr(md5(s.id || ':' || g), 1, 3) || '-8' || substr(md5(s.id || ':' || g), 4, 3) "
        "|| '-' || substr(md5(s.id || ':' || g), 7, 12))"
    )
    parts: list[sql.Composable] = []
    for name, kind in columns:
        column = sql.SQL("t.{}").format(sql.Identifier(name))
        if name == id_column:
            parts.append(new_id)
        elif kind == "bigint" and (name.endswith("_at") or name.endswith("_until")):
            parts.append(sql.SQL("{} - sh.us").format(column))
        else:
            parts.append(column)
    return sql.SQL(", ").join(parts)


def _run_tables(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """Tables other than the runs' with a ``run_id`` column."""
    rows = conn.execute(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = %s "
        "AND column_name = 'run_id' AND table_name <> 'runlane_runs' ORDER BY table_name",
        (schema,),
    ).fetchall()
    return [name for (name,) in rows]


async def drain_sample(dsn: str, schema: str, sample: int) -> None:
    """Trigger and drain ``sample`` runs through the runtime under test."""
    async with _runtime(dsn, schema, max_size=10) as rl:
        await rl.trigger_many(noop, [{"n": n} for n in range(sample)])
        worker = rl.worker(mode=WorkerMode.DRAIN, concurrency=100, handle_signals=False)
        await worker.run()
        if worker.executed != sample:
            raise SystemExit(f"the sample drain executed {worker.executed} of {sample} runs")


def replicate(dsn: str, schema: str, finished: int, sample: int) -> dict[str, Any]:
    """Copy the drained sample until ``finished`` finished runs exist; what was copied."""
    copies = max(0, finished // sample - 1)
    span_us = SPREAD_DAYS * 86_400 * 1_000_000
    per_statement = max(1, FILL_ROWS_PER_STATEMENT // sample)
    ident = sql.Identifier(schema)
    copied: dict[str, int] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE scale_sample AS SELECT id, environment, created_at "
                "FROM {}.runlane_runs WHERE environment = %s"
            ).format(ident),
            (ENVIRONMENT,),
        )
        tables = ["runlane_runs"]
        for table in _run_tables(conn, schema):
            found = conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM {}.{} t JOIN scale_sample s "
                    "ON s.id = t.run_id AND s.environment = t.environment"
                ).format(ident, sql.Identifier(table))
            ).fetchone()
            if found and found[0]:
                tables.append(table)
        statements = {}
        for table in tables:
            columns = _columns(conn, schema, table)
            id_column = "id" if table == "runlane_runs" else "run_id"
            join = sql.SQL("s.id = t.id") if table == "runlane_runs" else sql.SQL("s.id = t.run_id")
            statements[table] = sql.SQL(
                "INSERT INTO {schema}.{table} ({columns}) SELECT {select} "
                "FROM {schema}.{table} t JOIN scale_sample s "
                "ON {join} AND s.environment = t.environment, "
                "generate_series(%(first)s::bigint, %(last)s::bigint) g, "
                "LATERAL (SELECT g * %(span)s::bigint / %(copies)s::bigint AS us) sh"
            ).format(
                schema=ident,
                table=sql.Identifier(table),
                columns=sql.SQL(", ").join(sql.Identifier(name) for name, _ in columns),
                select=_copy_select(columns, id_column),
                join=join,
            )
        for first in range(1, copies + 1, per_statement):
            last = min(copies, first + per_statement - 1)
            params = {"first": first, "last": last, "span": span_us, "copies": max(1, copies)}
            for table in tables:
                done = conn.execute(statements[table], params)
                copied[table] = copied.get(table, 0) + done.rowcount
            print(f"  filled {(last + 1) * sample:,} of {finished:,}", file=sys.stderr, flush=True)
    return {"tables_copied": tables, "rows_copied": copied}


def vacuum_analyze(dsn: str, schema: str) -> None:
    """``VACUUM ANALYZE`` every table of ``schema``, as after a bulk load."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        names = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        for (name,) in names:
            conn.execute(
                sql.SQL("VACUUM (ANALYZE) {}.{}").format(
                    sql.Identifier(schema), sql.Identifier(name)
                )
            )
        # The load's dirty pages written out now, not by a checkpoint during the timings.
        conn.execute("CHECKPOINT")


def table_sizes(dsn: str, schema: str) -> dict[str, Any]:
    """Rows and bytes (heap, indexes, total) of the tables of ``schema`` holding rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        runs = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.runlane_runs").format(sql.Identifier(schema))
        ).fetchone()
        rows = conn.execute(
            "SELECT c.relname, c.reltuples::bigint, pg_relation_size(c.oid), "
            "pg_indexes_size(c.oid), pg_total_relation_size(c.oid) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r' AND c.reltuples > 0 "
            "ORDER BY pg_total_relation_size(c.oid) DESC",
            (schema,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT t.relname, i.relname, pg_relation_size(i.oid) "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "WHERE n.nspname = %s AND pg_relation_size(i.oid) > 8192 "
            "ORDER BY pg_relation_size(i.oid) DESC",
            (schema,),
        ).fetchall()
    total_runs = int(runs[0]) if runs else 0
    per_million = 1_000_000 / max(1, total_runs)
    tables = {
        name: {
            "rows": tuples,
            "heap_bytes": heap,
            "index_bytes": index,
            "total_bytes": total,
            "total_bytes_per_million_runs": round(total * per_million),
        }
        for name, tuples, heap, index, total in rows
    }
    return {
        "runs": total_runs,
        "tables": tables,
        "indexes": {f"{table}.{index}": size for table, index, size in indexes},
        "total_bytes": sum(t["total_bytes"] for t in tables.values()),
        "total_bytes_per_million_runs": round(
            sum(t["total_bytes"] for t in tables.values()) * per_million
        ),
    }


def seq_scans(dsn: str, schema: str) -> dict[str, int]:
    """Sequential scans of each table of ``schema`` holding more than 10,000 rows so far:
    a claim or a trigger that read a large table whole would show here."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s.relname, s.seq_scan FROM pg_stat_user_tables s "
            "JOIN pg_class c ON c.oid = s.relid "
            "WHERE s.schemaname = %s AND c.reltuples > 10000",
            (schema,),
        ).fetchall()
    return {name: int(count) for name, count in rows}


# -- pruning ------------------------------------------------------------------------------


async def prune(rl: Runlane) -> dict[str, Any]:
    """Prune the finished runs older than PRUNE_OLDER_THAN_DAYS through the public API."""
    started = time.perf_counter()
    deleted = await rl.runs.prune(older_than=timedelta(days=PRUNE_OLDER_THAN_DAYS))
    elapsed = time.perf_counter() - started
    return {
        "runs_deleted": deleted,
        "seconds": round(elapsed, 2),
        "runs_per_second": round(deleted / elapsed) if elapsed else 0,
    }


# -- the drain worker's RSS -----------------------------------------------------------------


def rss_bytes() -> int:
    """This process's resident set size now (``VmRSS``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS in /proc/self/status (Linux only)")


async def drain_child(dsn: str, schema: str, runs: int, concurrency: int) -> dict[str, Any]:
    """In the worker process: drain what is due, taking RSS at the marks of ``runs``."""
    async with _runtime(dsn, schema, max_size=10) as rl:
        worker = rl.worker(mode=WorkerMode.DRAIN, concurrency=concurrency, handle_signals=False)
        marks = [int(runs * share) for share in RSS_MARKS]
        taken: dict[str, int] = {}
        peak = rss_bytes()
        start = peak

        async def sample() -> None:
            nonlocal peak
            while True:
                executed, rss = worker.executed, rss_bytes()
                peak = max(peak, rss)
                for share, mark in zip(RSS_MARKS, marks, strict=True):
                    if executed >= mark and f"{share:.0%}" not in taken:
                        taken[f"{share:.0%}"] = rss
                await asyncio.sleep(RSS_POLL_SECONDS)

        sampler = asyncio.ensure_future(sample())
        began = time.perf_counter()
        try:
            await worker.run()
        finally:
            sampler.cancel()
        elapsed = time.perf_counter() - began
        end = rss_bytes()
        for share in RSS_MARKS:  # a mark the last poll missed is the end
            taken.setdefault(f"{share:.0%}", end)
        first, last = taken[f"{RSS_MARKS[0]:.0%}"], taken[f"{RSS_MARKS[-1]:.0%}"]
        return {
            "runs": runs,
            "executed": worker.executed,
            "concurrency": concurrency,
            "seconds": round(elapsed, 1),
            "runs_per_second": round(worker.executed / elapsed) if elapsed else 0,
            "start_rss": start,
            "rss_at": taken,
            "end_rss": end,
            "peak_rss": max(peak, end),
            "last_over_first": round(last / first, 3),
        }


def drain_in_child(dsn: str, schema: str, runs: int, concurrency: int) -> dict[str, Any]:
    """Run the drain worker in its own process (the same tree), its report."""
    env = dict(os.environ)
    if SRC:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, env.get("PYTHONPATH")]))
    command = [sys.executable, __file__, "--drain-child", dsn, "--schema", schema]
    command += ["--drain", str(runs), "--concurrency", str(concurrency)]
    if SRC:
        command += ["--src", SRC]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the drain worker failed:\n{done.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


# -- the whole run ------------------------------------------------------------------------------


def _drop(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def measure(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement, in order; the report."""
    result: dict[str, Any] = {
        "finished": args.finished,
        "due": args.due,
        "src": SRC or "this checkout",
    }
    empty, filled = "scale_empty", "scale_filled"
    _drop(dsn, empty)
    _drop(dsn, filled)

    _log("empty table: claims and triggers")
    async with _runtime(dsn, empty) as rl:
        # Due runs for this measurement and for the rounds after the fill.
        await _trigger_many(rl, (args.claims + WARMUP) * (1 + args.rounds))
        result["empty_before_fill"] = await measure_calls(rl, args.claims, args.triggers)

    _log(f"fill: drain a sample of {args.sample:,}, copy it to {args.finished:,}")
    began = time.perf_counter()
    await drain_sample(dsn, filled, args.sample)
    result["fill"] = replicate(dsn, filled, args.finished, args.sample)
    async with _runtime(dsn, filled) as rl:
        await _trigger_many(rl, args.due)
    _log("vacuum analyze")
    vacuum_analyze(dsn, filled)
    result["fill"]["seconds"] = round(time.perf_counter() - began, 1)
    result["sizes"] = table_sizes(dsn, filled)
    _log(f"filled in {result['fill']['seconds']} s; sizes: {json.dumps(result['sizes'])}")

    # The load on a shared machine swings between spells: the empty and the filled
    # table take turns, each round timing both, and the ratio pools the rounds.
    _log("claims and triggers, empty and filled in turns")
    scans_before = seq_scans(dsn, filled)
    async with _runtime(dsn, empty) as small, _runtime(dsn, filled) as rl:
        samples: dict[str, dict[str, list[float]]] = {
            name: {"claim": [], "trigger": []} for name in ("empty", "filled")
        }
        for turn in range(args.rounds):
            pair = (("empty", small), ("filled", rl))
            for name, runtime in pair if turn % 2 == 0 else pair[::-1]:
                samples[name]["claim"] += await claim_times(runtime, args.claims // args.rounds)
                samples[name]["trigger"] += await trigger_times(
                    runtime, args.triggers // args.rounds
                )
        for name in ("empty", "filled"):
            result[name] = {call: _ms(values) for call, values in samples[name].items()}
        result["ratio"] = {
            f"{call}_{stat}": result["filled"][call][f"{stat}_ms"]
            / result["empty"][call][f"{stat}_ms"]
            for call in ("claim", "trigger")
            for stat in ("median", "p95")
        }
        _log(f"empty {json.dumps(result['empty'])} filled {json.dumps(result['filled'])}")
        await asyncio.sleep(1.0)  # the server's statistics reach the views within a second
        scans_after = seq_scans(dsn, filled)
        result["seq_scans_during_timings"] = {
            table: scans_after[table] - scans_before.get(table, 0) for table in scans_after
        }
        # After the scan count: counting every status reads the whole table.
        _log("queue_stats, empty and filled in turns")
        for turn in range(args.rounds):
            pair = (("empty", small), ("filled", rl))
            for name, runtime in pair if turn % 2 == 0 else pair[::-1]:
                samples[name].setdefault("queue_stats", [])
                samples[name]["queue_stats"] += await stats_times(runtime, STATS_CALLS)
        for name in ("empty", "filled"):
            result[name]["queue_stats"] = _ms(samples[name]["queue_stats"])
        result["ratio"]["queue_stats_median"] = (
            result["filled"]["queue_stats"]["median_ms"]
            / result["empty"]["queue_stats"]["median_ms"]
        )
        _log("prune")
        result["prune"] = prune_result = await prune(rl)
        _log(f"pruned: {json.dumps(prune_result)}")
        if prune_result["runs_deleted"] == 0 and args.finished >= args.sample * 10:
            raise SystemExit("pruning deleted no runs")
        if args.drain:
            _log(f"trigger {args.drain:,} runs to drain")
            await _trigger_many(rl, args.drain)
    if args.drain:
        # The worker drains every due run: the --drain just triggered and what is
        # left of the due runs; the RSS marks are shares of all of them.
        with psycopg.connect(dsn, autocommit=True) as conn:
            due = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.runlane_runs WHERE status = 'queued'").format(
                    sql.Identifier(filled)
                )
            ).fetchone()
        _log("drain")
        result["drain"] = drain_in_child(dsn, filled, int(due[0]) if due else 0, args.concurrency)
    if not args.keep:
        _drop(dsn, filled)
        _drop(dsn, empty)
    return result


def _mib(value: float) -> str:
    return f"{value / 2**20:,.1f} MiB"


def _print(result: dict[str, Any]) -> None:
    print(f"runlane from {result['src']}")
    print(
        f"filled {result['finished']:,} finished runs + {result['due']:,} due "
        f"in {result['fill']['seconds']} s (copied: {', '.join(result['fill']['tables_copied'])})"
    )
    before = result["empty_before_fill"]
    print(
        f"empty table before the fill: claim median {before['claim']['median_ms']:.2f} ms, "
        f"trigger median {before['trigger']['median_ms']:.2f} ms"
    )
    print("empty -> filled, in turns:")
    for call in ("claim", "trigger"):
        empty, filled = result["empty"][call], result["filled"][call]
        print(
            f"{call:8} median {empty['median_ms']:.2f} -> {filled['median_ms']:.2f} ms "
            f"({result['ratio'][f'{call}_median']:.2f}x), p95 {empty['p95_ms']:.2f} -> "
            f"{filled['p95_ms']:.2f} ms ({result['ratio'][f'{call}_p95']:.2f}x)   goal <= 1.5x"
        )
    empty, filled = result["empty"]["queue_stats"], result["filled"]["queue_stats"]
    print(
        f"{'stats':8} median {empty['median_ms']:.2f} -> {filled['median_ms']:.2f} ms "
        f"({result['ratio']['queue_stats_median']:.2f}x)   no goal: rl.queue_stats() counts "
        "every run of the environment, finished ones too"
    )
    scans = ", ".join(f"{t} {n}" for t, n in result["seq_scans_during_timings"].items())
    print(f"sequential scans of the large tables during the timings: {scans}")
    prune = result["prune"]
    print(
        f"prune    {prune['runs_deleted']:,} runs in {prune['seconds']} s: "
        f"{prune['runs_per_second']:,} runs/s   goal >= 50,000/s"
    )
    sizes = result["sizes"]
    print(
        f"sizes with {sizes['runs']:,} runs: {_mib(sizes['total_bytes'])}, "
        f"{_mib(sizes['total_bytes_per_million_runs'])} per million runs"
    )
    print(f"  {'table':32} {'rows':>12} {'heap':>12} {'indexes':>12} {'per 1M runs':>12}")
    for name, table in sizes["tables"].items():
        print(
            f"  {name:32} {table['rows']:>12,} {_mib(table['heap_bytes']):>12} "
            f"{_mib(table['index_bytes']):>12} {_mib(table['total_bytes_per_million_runs']):>12}"
        )
    for name, size in sizes["indexes"].items():
        print(f"    index {name:50} {_mib(size):>12}")
    drain = result.get("drain")
    if drain:
        marks = ", ".join(f"{mark} {_mib(rss)}" for mark, rss in drain["rss_at"].items())
        print(
            f"drain    {drain['executed']:,} runs in {drain['seconds']} s "
            f"({drain['runs_per_second']:,}/s, {drain['concurrency']} slots); RSS at {marks}; "
            f"last/first {drain['last_over_first']:.3f}   goal <= 1.10"
        )


def main() -> None:
    """Parse options, start a server unless one is given, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--finished", type=int, default=DEFAULT_FINISHED)
    parser.add_argument("--due", type=int, default=DEFAULT_DUE)
    parser.add_argument("--drain", type=int, default=DEFAULT_DRAIN, help="0 skips the drain")
    parser.add_argument("--sample", type=int, default=DEFAULT_SAMPLE)
    parser.add_argument("--claims", type=int, default=DEFAULT_CLAIMS)
    parser.add_argument("--triggers", type=int, default=DEFAULT_TRIGGERS)
    parser.add_argument(
        "--rounds", type=int, default=10, help="turns of empty and filled timings after the fill"
    )
    parser.add_argument("--concurrency", type=int, default=100, help="the drain worker's slots")
    parser.add_argument("--src", help="a checkout's src folder to import runlane from")
    parser.add_argument("--keep", action="store_true", help="keep the filled schema")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--drain-child", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drain_child:
        report = asyncio.run(
            drain_child(args.drain_child, args.schema, args.drain, args.concurrency)
        )
        print(json.dumps(report))
        return
    if args.finished < args.sample or args.sample < 1:
        parser.error("--finished must be at least --sample, and --sample at least 1")
    if args.rounds < 1 or args.claims < args.rounds or args.triggers < args.rounds:
        parser.error("--rounds must be at least 1 and at most --claims and --triggers")
    with bench_database("runlane_bench") as dsn:
        result = asyncio.run(measure(dsn, args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)


if __name__ == "__main__":
    main()
