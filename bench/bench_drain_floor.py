"""The tuned PostgreSQL drain beside its floor: plain SQL doing Runlane's own writes.

The peers harness's ``runlane-tuned`` row (2 worker processes x 100 slots) asks for
1.5x pgqueuer-tuned. This shows how much of a drain is the SQL and how much is the
runtime around it, on Runlane's own schema, in one run (rates drift between spells
of these machines; ratios within a run do not)::

    .venv/bin/python bench/bench_drain_floor.py                  # own throwaway server
    .venv/bin/python bench/bench_drain_floor.py --runs 10000 --rounds 5 --json
    RUNLANE_BENCH_DATABASE_URL=postgresql://... .venv/bin/python bench/bench_drain_floor.py

Each round drains ``--runs`` prefilled no-op runs (``trigger_many``, then ANALYZE and
CHECKPOINT, as the harness does) on a fresh schema, two ways, taking turns:

- ``runlane``: ``--processes`` worker processes of ``--slots`` slots each
  (``WorkerMode.DRAIN``), the harness's ``runlane-tuned`` setting;
- ``floor``: as many processes, each a loop of one pipelined transaction per batch of
  ``--slots`` runs, as Runlane's busy worker sends it: the driver's own
  ``apply_transitions`` statement settles the previous batch (its parameters built
  by the driver's ``transition_params``: compare-and-set, the success kept on the
  row), and Runlane's claim function takes the next (lease and start on the row). The
  same statements, with little around them in Python: no handler, no task per run,
  no ``Run`` records built.

The clock runs from a start signal given once every process is connected until the
last one has found nothing left. Every run must end ``succeeded``. Client CPU per
run is the drain processes' own over the same span (their set-up is not counted);
server CPU per run is read from ``/proc`` for every process named ``postgres`` on
this machine (shown as ``-`` where there is none: a server elsewhere), so another
busy server there would count too; machine CPU per run is every core's busy time
over the span (``/proc/stat``), the figure ``bench_peers_cpu.py`` gives a peer's drain.
``--ways floor`` measures one way only (that script runs the floor this way between
the harness's drains).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from cpu_counters import machine_cpu_seconds, per_run, server_cpu_seconds
from tests.support.postgres_server import bench_database

from runlane import Context, Runlane, WorkerMode, postgres_lane, queue, task
from runlane.storage.postgres.queries import QUERY_TEMPLATES
from runlane.storage.postgres.transitions import transition_params
from runlane.storage.sql.claiming import key_lock_prefix
from runlane.types.priorities import DEFAULT_PRIORITY_WINDOW, claim_horizon
from runlane.types.records import NewEvent, RunChanges, Transition
from runlane.types.runs import RunEventType, RunStatus

RUNS = 20_000
PROCESSES = 2
SLOTS = 100
ROUNDS = 3
ENVIRONMENT = "bench"
WAYS = ("runlane", "floor")

bench_queue = queue("bench", default=True)


@task("bench.noop")
async def noop(payload: Any, ctx: Context) -> None:
    """Does nothing: the benchmark measures the runtime, not the task."""


def _runtime(dsn: str, schema: str) -> Runlane:
    return Runlane(
        lane=postgres_lane(dsn, schema=schema),
        queues=[bench_queue],
        tasks=[noop],
        environment=ENVIRONMENT,
    )


# -- the SQL of the floor's loop -------------------------------------------------------

#: Runlane's own claim (migration 017): lease the oldest due runs, the start on the row.
_CLAIM = """
SELECT * FROM {claim}(
    %(environment)s, %(queues)s::text[], %(limit)s::bigint, %(now)s::bigint,
    %(key_lock_prefix)s, %(worker)s, %(token)s, %(expires)s::bigint, NULL::text,
    %(horizon)s::bigint
)
"""

#: What a success writes (settle_attempt's common case), shared by every transition.
_SUCCEEDED = RunChanges(RunStatus.SUCCEEDED)


def _statements(schema: str) -> tuple[sql.Composed, str]:
    """The claim, and the driver's own ``apply_transitions`` for ``schema``."""
    claim = sql.SQL(_CLAIM).format(claim=sql.Identifier(schema, "runlane_claim_due_runs"))
    quoted = sql.Identifier(schema).as_string(None)
    return claim, QUERY_TEMPLATES["apply_transitions"].replace("{schema}", quoted)


def _successes(claimed: list[tuple[Any, ...]], columns: list[str]) -> list[Transition]:
    """The success of each claimed run, as the worker writes it."""
    run_id, sequence, attempt, token = (
        columns.index(name) for name in ("id", "event_sequence", "attempt", "lease_token")
    )
    return [
        Transition(
            row[run_id],
            row[sequence],
            _SUCCEEDED,
            (NewEvent(RunEventType.SUCCEEDED, {"attempt": row[attempt]}),),
            row[token],
        )
        for row in claimed
    ]


def _micros() -> int:
    return time.time_ns() // 1_000


async def _floor_loop(
    dsn: str, schema: str, slots: int, started: Any, go: Any
) -> tuple[int, float]:
    """Drain with the floor's statements until a claim finds nothing; runs settled,
    and the CPU seconds the drain took."""
    claim, settle = _statements(schema)
    worker, token = f"floor-{os.getpid()}", uuid.uuid4().hex
    settled = 0
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT 1")
        started.set()
        go.wait()
        cpu = time.process_time()
        pending: list[Transition] = []
        begin, plan, settling, claiming, commit = (conn.cursor() for _ in range(5))
        while True:
            now = _micros()
            params = {
                "environment": ENVIRONMENT,
                "queues": [bench_queue.name],
                "key_lock_prefix": key_lock_prefix(schema, ENVIRONMENT),
                "now": now,
                "limit": slots,
                "worker": worker,
                "token": token,
                "expires": now + 30_000_000,
                "horizon": claim_horizon(now, DEFAULT_PRIORITY_WINDOW),
            }
            # One round trip and one commit per batch, as Runlane's busy worker sends
            # it (storage/postgres/claims.py, _in_one_round_trip).
            async with conn.pipeline():
                await begin.execute("BEGIN")
                await plan.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                if pending:
                    await settling.execute(
                        settle, transition_params(ENVIRONMENT, pending, now), prepare=True
                    )
                await claiming.execute(claim, params, prepare=True)
                await commit.execute("COMMIT")
            if pending:
                settled += len(await settling.fetchall())
            columns = [column.name for column in claiming.description or ()]
            pending = _successes(await claiming.fetchall(), columns)
            if not pending:
                return settled, time.process_time() - cpu


async def _runlane_drain(
    dsn: str, schema: str, slots: int, started: Any, go: Any
) -> tuple[int, float]:
    rl = _runtime(dsn, schema)
    async with rl:
        await rl.runs.list(limit=1)  # the pool is open before the clock starts
        worker = rl.worker(concurrency=slots, mode=WorkerMode.DRAIN, handle_signals=False)
        started.set()
        go.wait()
        cpu = time.process_time()
        await worker.run()
        return worker.executed, time.process_time() - cpu


def _child(way: str, dsn: str, schema: str, slots: int, started: Any, go: Any, out: Any) -> None:
    drain = _runlane_drain if way == "runlane" else _floor_loop
    done, cpu = asyncio.run(drain(dsn, schema, slots, started, go))
    out.put((time.time(), done, cpu))


# -- one measurement -------------------------------------------------------------------


async def _prefill(dsn: str, schema: str, runs: int) -> None:
    rl = _runtime(dsn, schema)
    await rl.migrate()
    async with rl:
        await rl.trigger_many(noop, [{"n": n} for n in range(runs)])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "runlane_runs")))
        await conn.execute("CHECKPOINT")


def _succeeded(dsn: str, schema: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE status = 'succeeded'").format(
        sql.Identifier(schema, "runlane_runs")
    )
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def _drop(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def measure_once(way: str, dsn: str, runs: int, processes: int, slots: int) -> dict[str, Any]:
    """Drain ``runs`` prefilled runs one ``way``: runs per second and CPU per run."""
    schema = f"runlane_floor_{uuid.uuid4().hex[:8]}"
    try:
        asyncio.run(_prefill(dsn, schema, runs))
        spawn = mp.get_context("spawn")
        go, out = spawn.Event(), spawn.Queue()
        children = []
        for _ in range(processes):
            started = spawn.Event()
            child = spawn.Process(
                target=_child, args=(way, dsn, schema, slots, started, go, out), daemon=True
            )
            child.start()
            children.append((child, started))
        for _, started in children:
            if not started.wait(120):
                raise SystemExit(f"{way}: a process did not start")
        server_before, machine_before = server_cpu_seconds(), machine_cpu_seconds()
        began = time.time()
        go.set()
        ends = [out.get(timeout=600) for _ in children]
        server_after, machine_after = server_cpu_seconds(), machine_cpu_seconds()
        for child, _ in children:
            child.join(60)
        done = _succeeded(dsn, schema)
        if done != runs:
            raise SystemExit(f"{way}: {done} of {runs} runs succeeded")
        seconds = max(end for end, _, _ in ends) - began
        return {
            "runs_per_s": runs / seconds,
            "client_cpu_us_per_run": sum(cpu for _, _, cpu in ends) / runs * 1e6,
            "server_cpu_us_per_run": per_run(server_before, server_after, runs),
            "machine_cpu_us_per_run": per_run(machine_before, machine_after, runs),
        }
    finally:
        _drop(dsn, schema)


def measure(
    dsn: str, runs: int, processes: int, slots: int, rounds: int, ways: Sequence[str] = WAYS
) -> dict[str, Any]:
    """Every way once a round, in turns; medians over the rounds."""
    results: dict[str, list[dict[str, Any]]] = {way: [] for way in ways}
    for _ in range(rounds):
        for way in ways:
            results[way].append(measure_once(way, dsn, runs, processes, slots))

    def median(way: str, key: str) -> float | None:
        values = [r[key] for r in results[way] if r[key] is not None]
        return statistics.median(values) if values else None

    summary: dict[str, Any] = {
        way: {key: median(way, key) for key in results[way][0]} for way in ways
    }
    if set(WAYS) <= set(ways):
        summary["runlane_to_floor"] = (
            summary["runlane"]["runs_per_s"] / summary["floor"]["runs_per_s"]
        )
    summary["rounds"] = {way: [r["runs_per_s"] for r in results[way]] for way in ways}
    summary["settings"] = {"runs": runs, "processes": processes, "slots": slots}
    return summary


def _print(summary: dict[str, Any]) -> None:
    settings, rounds = summary["settings"], summary["rounds"]
    print(
        f"drain of {settings['runs']:,} runs, {settings['processes']} processes x "
        f"{settings['slots']} (medians of {len(next(iter(rounds.values())))} rounds)"
    )
    show: Callable[[float | None], str] = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    print(
        f"{'way':10} {'runs/s':>9} {'client µs/run':>14} {'server µs/run':>14}"
        f" {'machine µs/run':>15}"
    )
    for way in rounds:
        row = summary[way]
        print(
            f"{way:10} {show(row['runs_per_s']):>9} {show(row['client_cpu_us_per_run']):>14} "
            f"{show(row['server_cpu_us_per_run']):>14} {show(row['machine_cpu_us_per_run']):>15}"
        )
    if "runlane_to_floor" in summary:
        print(f"runlane / floor: {summary['runlane_to_floor']:.2f}x")


def main() -> None:
    """Parse options, start a server unless one is given, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--processes", type=int, default=PROCESSES)
    parser.add_argument("--slots", type=int, default=SLOTS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument(
        "--ways", default=",".join(WAYS), help="Comma-separated: runlane, floor or both."
    )
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args()
    ways = [way for way in args.ways.split(",") if way]
    if not ways or set(ways) - set(WAYS):
        parser.error(f"--ways takes {', '.join(WAYS)}")
    with bench_database("runlane_bench") as dsn:
        summary = measure(dsn, args.runs, args.processes, args.slots, max(1, args.rounds), ways)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print(summary)


if __name__ == "__main__":
    main()
