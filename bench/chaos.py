"""The kill -9 chaos run: workers die at random mid-drain and nothing is lost or doubled.

N worker processes drain M runs of a task that appends one line per execution to
a log file (a short ``O_APPEND`` write is atomic across processes). While they
drain, the script kills a random worker with SIGKILL every ``--kill-interval``
and starts a new one in its place, and runs ``tick`` all along so expired
leases are recovered. When every kill is done it lets the survivors finish,
recovers what the dead held, and counts:

- runs triggered and runs succeeded (and failed: a run killed in flight more
  often than its retry budget allows);
- lost runs: not terminal once recovery had its chance (must be 0);
- runs recorded twice as succeeded: more than one ``run.succeeded`` event, or a
  stored result from an attempt other than the last (must be 0);
- executions in total and re-executions: delivery is at least once, so runs
  in flight at a kill run again; that is the price, not a fault.

    .venv/bin/python bench/chaos.py --driver sqlite --runs 5000 --kills 20
    .venv/bin/python bench/chaos.py --driver postgres --dsn postgresql://... --runs 5000
    .venv/bin/python bench/chaos.py --driver postgres          # starts a throwaway server
    .venv/bin/python bench/chaos.py --driver sqlite --runs 200 --kills 3 --json

With ``--server-fault`` (PostgreSQL, on a throwaway server of its own) the server
misbehaves too, during the drain: ``restart-fast`` and ``restart-immediate`` run
``pg_ctl restart -m fast|immediate`` ``--restarts`` times, ``terminate`` runs
``pg_terminate_backend`` on every runlane connection every
``--terminate-interval`` seconds (300 ms by default). The workers are not
restarted for it; they must reconnect on their own:

    .venv/bin/python bench/chaos.py --driver postgres --server-fault restart-immediate --kills 0
    .venv/bin/python bench/chaos.py --driver postgres --server-fault terminate --kills 0

With ``--graph`` the runs form a workflow graph instead of independent runs:
chains of five (``trigger_chain``) and fan-ins (``trigger_group`` whose callback
waits for twelve members), about ``--runs`` runs in all. Then it also counts
dependents released more than once (``run.dependencies_met`` twice), dependents
that started before a dependency had succeeded, and runs left waiting (all must
be 0):

    .venv/bin/python bench/chaos.py --driver sqlite --graph --runs 300 --kills 5

The exit status is 0 when no run was lost or recorded twice as succeeded, and
every kill landed; 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runlane import (
    Context,
    ErrorCode,
    RetryPolicy,
    Run,
    Runlane,
    RunlaneError,
    RunStatus,
    postgres_lane,
    queue,
    sqlite_lane,
    task,
)
from runlane.types.runs import RunEventType

MAIN = queue("main", default=True)
#: A run can be caught in flight by several kills; give it room so none fails for that.
RETRY = RetryPolicy(max_attempts=20, initial_delay="0s", max_delay="0s")
WORKER_LEASE = "2s"
WORKER_HEARTBEAT = "400ms"
TRIGGER_CHUNK = 1_000
#: The longest a task takes (it sleeps between a sixth of this and this).
DEFAULT_TASK_SECONDS = 0.03


@task("chaos.record", retry=RETRY)
async def record(payload: Any, ctx: Context) -> dict[str, Any]:
    """Log one execution (run id, attempt, pid), then take a little time so kills catch some."""
    fd = os.open(os.environ["CHAOS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{ctx.run_id} {ctx.attempt} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    longest = float(os.environ.get("CHAOS_TASK_SECONDS", DEFAULT_TASK_SECONDS))
    await asyncio.sleep(random.uniform(longest / 6, longest))
    return {"n": payload["n"], "attempt": ctx.attempt}


def build(driver: str, store: str, environment: str) -> Runlane:
    """The runtime every process builds: the script's own and each worker's."""
    lane = sqlite_lane(store) if driver == "sqlite" else postgres_lane(store)
    return Runlane(lane=lane, queues=[MAIN], tasks=[record], environment=environment)


# -- the worker process ----------------------------------------------------------------


def worker_main() -> None:
    """Run one polling worker until killed (the role a spawned process plays)."""
    rl = build(os.environ["CHAOS_DRIVER"], os.environ["CHAOS_STORE"], os.environ["CHAOS_ENV"])
    concurrency = int(os.environ["CHAOS_CONCURRENCY"])
    worker = rl.worker(
        concurrency=concurrency,
        lease_duration=WORKER_LEASE,
        heartbeat_interval=WORKER_HEARTBEAT,
        poll_interval="50ms",
    )
    asyncio.run(worker.run())


# -- the orchestrator ------------------------------------------------------------------


@dataclass
class Report:
    """The figures a chaos run ends with."""

    driver: str
    runs_triggered: int
    runs_succeeded: int
    runs_failed: int
    lost_runs: int
    runs_recorded_twice_as_succeeded: int
    executions: int
    re_executions: int
    runs_executed_more_than_once: int
    succeeded_without_an_execution: int
    kills: int
    kills_requested: int
    server_fault: str
    server_faults: int
    workers_started: int
    leases_recovered_by_tick: int
    seconds: float
    #: --graph: dependents whose run.dependencies_met was written more than once.
    dependents_released_twice: int = 0
    #: --graph: dependents that started before one of their dependencies succeeded.
    started_before_dependencies: int = 0
    #: --graph: runs still waiting at the end (their dependencies all finished).
    runs_left_waiting: int = 0

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing doubled, and every kill landed."""
        return (
            self.lost_runs == 0
            and self.runs_recorded_twice_as_succeeded == 0
            and self.succeeded_without_an_execution == 0
            and self.kills == self.kills_requested
            and (self.server_fault == "none" or self.server_faults > 0)
            and self.dependents_released_twice == 0
            and self.started_before_dependencies == 0
            and self.runs_left_waiting == 0
        )


class ServerFaults:
    """The server's misbehaviour during the drain: restarts, or terminated backends."""

    def __init__(self, args: argparse.Namespace, server: Any, dsn: str) -> None:
        self.kind: str = args.server_fault
        self.restarts: int = args.restarts
        self.interval: float = args.terminate_interval
        self.server = server
        self.dsn = dsn
        self.count = 0

    async def run(self, drained: asyncio.Event, rng: random.Random) -> None:
        """Fault until ``drained`` (at most ``restarts`` restarts)."""
        if self.kind == "none":
            return
        if self.kind == "terminate":
            while not drained.is_set():
                self.count += await asyncio.to_thread(self._terminate)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(drained.wait(), self.interval)
            return
        mode = self.kind.removeprefix("restart-")
        for _ in range(self.restarts):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(drained.wait(), rng.uniform(1.0, 3.0))
            if drained.is_set():
                return
            await asyncio.to_thread(self.server.restart, mode)
            self.count += 1

    def _terminate(self) -> int:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, application_name="chaos") as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'runlane' AND pid <> pg_backend_pid()"
            ).fetchall()
        return sum(1 for (done,) in rows if done)


class Workers:
    """The worker processes: start, kill -9 at random, stop."""

    def __init__(self, env: dict[str, str], stderr: Path) -> None:
        self.env = env
        self.stderr = stderr
        self.alive: list[subprocess.Popen[bytes]] = []
        self.started = 0
        self.kills = 0

    def start(self) -> None:
        with self.stderr.open("ab") as stderr:
            process = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--role", "worker"],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.alive.append(process)
        self.started += 1

    def kill_one(self, rng: random.Random, busy: set[int]) -> None:
        """SIGKILL a random live worker (no handler, no finally) and start its successor.

        Workers that have executed something (``busy`` pids) go first: a process still
        importing holds no lease, so killing it proves nothing.
        """
        self.reap()
        candidates = [p for p in self.alive if p.pid in busy] or self.alive
        if candidates:
            victim = rng.choice(candidates)
            self.alive.remove(victim)
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(timeout=30)
            self.kills += 1
        self.start()

    def reap(self) -> None:
        """Forget workers that exited on their own (they should not: it is logged)."""
        for process in [p for p in self.alive if p.poll() is not None]:
            self.alive.remove(process)
            print(f"chaos: worker {process.pid} exited with {process.returncode}", file=sys.stderr)

    def stop(self) -> None:
        """SIGTERM: a graceful stop releases whatever each survivor still holds."""
        for process in self.alive:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.alive:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        self.alive.clear()


async def _all_runs(rl: Runlane) -> list[Run]:
    runs: list[Run] = []
    cursor: str | None = None
    while True:
        page = await rl.runs.list(limit=500, cursor=cursor)
        runs.extend(page.data)
        cursor = page.next_cursor
        if cursor is None:
            return runs


def _executing_pids(log: Path) -> set[int]:
    if not log.exists():
        return set()
    return {int(line.split()[2]) for line in log.read_text().splitlines() if line.count(" ") == 2}


async def _open_runs(rl: Runlane) -> int | None:
    """Runs not finished yet; None while the server is away (a --server-fault)."""
    try:
        stats = await rl.queue_stats()
    except RunlaneError as error:
        if error.code is not ErrorCode.STORAGE_UNAVAILABLE:
            raise  # only the faults this script makes are expected
        return None
    return sum(s.waiting + s.running for s in stats)


async def _ticker(rl: Runlane, totals: Counter[str], stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            report = await rl.tick()
        except RunlaneError as error:
            # The server restarting under --server-fault: tick again on the next turn.
            if error.code is not ErrorCode.STORAGE_UNAVAILABLE:
                raise
        else:
            totals["leases_recovered"] += report.leases_recovered
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


async def _succeeded_events(rl: Runlane, runs: list[Run]) -> dict[str, int]:
    limit = asyncio.Semaphore(16)

    async def count(run: Run) -> tuple[str, int]:
        async with limit:
            events = await rl.runs.events(run.id)
        return run.id, sum(1 for e in events if e.type is RunEventType.SUCCEEDED)

    return dict(await asyncio.gather(*(count(run) for run in runs)))


async def chaos(args: argparse.Namespace, store: str, workdir: Path, server: Any = None) -> Report:
    environment = f"chaos-{uuid.uuid4().hex[:10]}"
    log = workdir / "executions.log"
    env = os.environ | {
        "CHAOS_DRIVER": args.driver,
        "CHAOS_STORE": store,
        "CHAOS_ENV": environment,
        "CHAOS_LOG": str(log),
        "CHAOS_CONCURRENCY": str(args.concurrency),
        "CHAOS_TASK_SECONDS": str(args.task_seconds),
    }
    os.environ["CHAOS_LOG"] = str(log)
    rng = random.Random(args.seed)
    started = time.monotonic()
    rl = build(args.driver, store, environment)
    await rl.migrate()
    async with rl:
        if args.graph:
            triggered = await _trigger_graph(rl, args.runs)
        else:
            triggered = args.runs
            payloads = [{"n": n} for n in range(args.runs)]
            for offset in range(0, len(payloads), TRIGGER_CHUNK):
                await rl.trigger_many(record, payloads[offset : offset + TRIGGER_CHUNK])

        workers = Workers(env, workdir / "workers.stderr")
        totals: Counter[str] = Counter()
        stop_ticking = asyncio.Event()
        ticker = asyncio.create_task(_ticker(rl, totals, stop_ticking))
        faults = ServerFaults(args, server, store)
        drained = asyncio.Event()
        faulting = asyncio.create_task(faults.run(drained, rng))
        try:
            for _ in range(args.workers):
                workers.start()
            for _ in range(int(args.timeout * 10)):  # the first kill waits for real work
                if _executing_pids(log):
                    break
                await asyncio.sleep(0.1)
            for _ in range(args.kills):
                await asyncio.sleep(args.kill_interval * rng.uniform(0.5, 1.5))
                if await _open_runs(rl) == 0:
                    break  # drained before every kill: the report says how many landed
                workers.kill_one(rng, _executing_pids(log))
            # Let the survivors (and tick) finish everything, the dead's runs included.
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline and await _open_runs(rl) != 0:
                workers.reap()
                if not workers.alive:
                    workers.start()
                await asyncio.sleep(0.5)
        finally:
            drained.set()
            await faulting
            workers.stop()
            stop_ticking.set()
            await ticker
        totals["leases_recovered"] += (await rl.tick()).leases_recovered

        runs = await _all_runs(rl)
        executions = (
            Counter(line.split()[0] for line in log.read_text().splitlines() if line.strip())
            if log.exists()
            else Counter[str]()
        )
        succeeded = [run for run in runs if run.status is RunStatus.SUCCEEDED]
        succeeded_events = await _succeeded_events(rl, succeeded)
        # A result written by a stale attempt would carry an attempt other than the run's.
        doubled = {
            run.id
            for run in succeeded
            if succeeded_events[run.id] != 1
            or not isinstance(run.result, dict)
            or run.result.get("attempt") != run.attempt
        }
        graph = await _graph_figures(rl, runs) if args.graph else {}
        return Report(
            driver=args.driver,
            runs_triggered=triggered,
            runs_succeeded=len(succeeded),
            runs_failed=sum(1 for run in runs if run.status is RunStatus.FAILED),
            lost_runs=triggered - sum(1 for run in runs if run.status.is_terminal),
            runs_recorded_twice_as_succeeded=len(doubled),
            executions=sum(executions.values()),
            re_executions=sum(executions.values()) - len(executions),
            runs_executed_more_than_once=sum(1 for n in executions.values() if n > 1),
            succeeded_without_an_execution=sum(1 for run in succeeded if run.id not in executions),
            kills=workers.kills,
            kills_requested=args.kills,
            server_fault=args.server_fault,
            server_faults=faults.count,
            workers_started=workers.started,
            leases_recovered_by_tick=totals["leases_recovered"],
            seconds=round(time.monotonic() - started, 1),
            **graph,
        )


#: --graph: a chain's length, and a fan-in's members (its callback waits for them all).
CHAIN_LENGTH = 5
FAN_IN_MEMBERS = 12


async def _trigger_graph(rl: Runlane, runs: int) -> int:
    """Chains and fan-ins, about ``runs`` runs in all (half in each); how many."""
    n = 0
    count = 0
    while count < runs // 2:
        chain = [(record, {"n": n + step}) for step in range(CHAIN_LENGTH)]
        n += CHAIN_LENGTH
        count += len(await rl.trigger_chain(chain))
    while count < runs:
        members = [{"n": n + member} for member in range(FAN_IN_MEMBERS)]
        n += FAN_IN_MEMBERS + 1
        group = await rl.trigger_group(record, members, then=(record, {"n": n - 1}))
        count += len(group.runs) + 1
    return count


async def _graph_figures(rl: Runlane, runs: list[Run]) -> dict[str, int]:
    """What --graph adds to the report (see :class:`Report`)."""
    released_twice = started_early = 0
    for run in runs:
        dependencies = await rl.runs.dependencies(run.id)
        if not dependencies:
            continue
        events = await rl.runs.events(run.id)
        met = [e for e in events if e.type is RunEventType.DEPENDENCIES_MET]
        released_twice += len(met) > 1
        starts = [e.occurred_at for e in events if e.type is RunEventType.STARTED]
        finished = []
        for dependency in dependencies:
            history = await rl.runs.events(dependency.id)
            finished += [e.occurred_at for e in history if e.type is RunEventType.SUCCEEDED]
        if starts and (len(finished) < len(dependencies) or min(starts) < max(finished)):
            started_early += 1
    return {
        "dependents_released_twice": released_twice,
        "started_before_dependencies": started_early,
        "runs_left_waiting": sum(1 for run in runs if run.status is RunStatus.WAITING),
    }


@contextlib.contextmanager
def _store(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[str, Any]]:
    """Where the runs live, and the server to fault (None: no faults, or SQLite)."""
    if args.driver == "sqlite":
        yield str(workdir / "chaos.db"), None
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support
    from tests.support.postgres_server import PostgresServer, bench_database

    if args.server_fault != "none":
        # Faults need a server this script controls: never a given one.
        with PostgresServer() as server:
            yield server.create_database("runlane_chaos"), server
        return
    with bench_database("runlane_chaos", args.dsn) as dsn:
        yield dsn, None


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--role", choices=["chaos", "worker"], default="chaos", help=argparse.SUPPRESS
    )
    parser.add_argument("--driver", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--dsn",
        help="PostgreSQL DSN (default: RUNLANE_BENCH_DATABASE_URL, else a throwaway server)",
    )
    parser.add_argument("--runs", type=int, default=5_000)
    parser.add_argument("--workers", type=int, default=4, help="live worker processes")
    parser.add_argument("--concurrency", type=int, default=10, help="slots per worker")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument(
        "--kill-interval", type=float, default=0.5, help="mean seconds between kills"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds to wait for the drain after the last kill",
    )
    parser.add_argument(
        "--task-seconds",
        type=float,
        default=DEFAULT_TASK_SECONDS,
        help="the longest a task takes (slower tasks leave more attempts in flight)",
    )
    parser.add_argument(
        "--server-fault",
        choices=["none", "restart-fast", "restart-immediate", "terminate"],
        default="none",
        help="PostgreSQL only: restart the server or terminate its backends during the drain",
    )
    parser.add_argument("--restarts", type=int, default=3, help="restarts of a restart fault")
    parser.add_argument(
        "--terminate-interval",
        type=float,
        default=0.3,
        help="seconds between terminations of every runlane backend (terminate fault)",
    )
    parser.add_argument(
        "--graph", action="store_true", help="chains and fan-ins instead of independent runs"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=None, help="where the log (and SQLite file) go")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.role == "worker":
        worker_main()
        return 0
    with contextlib.ExitStack() as stack:
        workdir = args.dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        workdir.mkdir(parents=True, exist_ok=True)
        if args.server_fault != "none" and (args.driver != "postgres" or args.dsn):
            print("chaos: --server-fault needs --driver postgres and no --dsn", file=sys.stderr)
            return 2
        store, server = stack.enter_context(_store(args, workdir))
        report = asyncio.run(chaos(args, store, workdir, server))
    if args.json:
        print(json.dumps(asdict(report) | {"ok": report.ok}))
    else:
        for name, value in asdict(report).items():
            print(f"{name.replace('_', ' '):36} {value}")
        print(f"{'ok':36} {report.ok}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
