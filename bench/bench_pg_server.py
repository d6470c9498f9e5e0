"""Instructions the PostgreSQL server spends per operation, counted by callgrind.

``bench_instructions.py`` counts the client; this counts the server. It starts a
throwaway cluster whose postmaster and every backend run under ``valgrind
--tool=callgrind``, runs each workload twice (``--small`` and ``--large``
operations, each on connections of its own) and reports, per operation, the
difference of the two runs' totals divided by the difference of their counts, read
from the callgrind files of the backends that served them (written as each backend
exits). Connection set-up and first-use costs cancel out; the machine's load does
not enter a count::

    .venv/bin/python bench/bench_pg_server.py              # where a lone trigger's time goes
    .venv/bin/python bench/bench_pg_server.py --drain      # and a drain's, per run
    .venv/bin/python bench/bench_pg_server.py --json
    .venv/bin/python bench/bench_pg_server.py --drain --only drain --keep profiles

Workloads:

- ``raw insert``: ``bench_postgres.py``'s raw table and one-row insert, prepared,
  through psycopg: the floor the lone trigger is set against.
- ``lone trigger``: ``rl.trigger`` of a plain run, due now, as an application
  sends it. Under callgrind a trigger takes milliseconds, so the driver's look for a
  worker standing by (``HANDOFF_RECHECK``) would come round every few triggers
  instead of every hundred or so: it is set to an hour here, so only the first
  trigger sends the hand-off statement, as on a fast server with no worker idle.
- ``insert_run on ...``: the lone trigger's own statement sent through psycopg on
  the runs table (``full``) and on copies of it with parts of its indexes and
  triggers (``lean``: the primary key and ``runlane_runs_claim_order`` only;
  ``+ triggers``; ``+ indexes the run does not enter`` (partial indexes whose
  predicate a plain pending run fails); ``+ indexes the run enters``). The
  differences attribute the server's cost of a lone trigger to the table's indexes.
- ``lone attempt``: ``rl.execute_next()`` on runs ``trigger_many`` created beforehand
  (not counted): a claim of one run and a settle of one run, as an idle worker
  serves a lone trigger.
- ``drain`` (``--drain``): a ``WorkerMode.DRAIN`` worker of 100 slots executing
  no-op runs that ``trigger_many`` created beforehand (not counted): claims and
  settles, per run. Its two runs are larger (``--drain-small`` 1,000 and
  ``--drain-large`` 5,000): a drain sometimes claims on a second connection in one
  run and not in the other, and that connection's first use (planning the claim
  function's statements, some 50 million instructions) does not cancel out.

Needs PostgreSQL's server binaries and valgrind on this machine (as root, the server
runs as the ``postgres`` user, as the test fixtures run it). The cluster runs with
``synchronous_commit=off`` and ``autovacuum=off``: commits do not wait for the disk
(callgrind counts instructions, not waits) and no vacuum lands in a count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.support.postgres_server import find_postgres_bindir  # noqa: E402

import runlane.storage.postgres.driver as postgres_driver  # noqa: E402
from runlane import Context, Runlane, WorkerMode, postgres_lane, queue, task  # noqa: E402
from runlane.storage.postgres.queries import QUERY_TEMPLATES  # noqa: E402

SMALL, LARGE = 300, 1300
#: The drain's: a drain may open a second connection in one run and not in the other,
#: and that connection's first claim plans the claim function's statements (some
#: 50 million instructions); over 4,000 runs that is about 12,000 a run.
DRAIN_SMALL, DRAIN_LARGE = 1000, 5000
SCHEMA = "runlane"
RUN_USER = "postgres"
RAW_TABLE = """
CREATE TABLE raw_jobs (
    id BIGSERIAL PRIMARY KEY, queue TEXT NOT NULL, status TEXT NOT NULL,
    payload JSONB NOT NULL, run_at BIGINT NOT NULL, lease_token TEXT, updated_at BIGINT
);
CREATE INDEX ON raw_jobs (queue, run_at, id) WHERE status = 'queued';
"""
RAW_INSERT = (
    "INSERT INTO raw_jobs (queue, status, payload, run_at) VALUES ('bench', 'queued', %s, %s)"
)
#: The copies of the runs table, beside the table itself: name -> what they add to lean.
VARIANTS = {
    "lean": "primary key and runlane_runs_claim_order only",
    "lean_triggers": "+ the table's triggers",
    "lean_unentered": "+ the partial indexes a plain pending run does not enter",
    "lean_entered": "+ the other indexes a plain pending run enters",
}
#: The index every claim reads: kept in every copy.
CLAIM_ORDER = "runlane_runs_claim_order"


@task("bench.noop")
async def noop(payload: Any, ctx: Context) -> None:
    return None


# -- the server under callgrind ----------------------------------------------------------


class CallgrindServer:
    """A throwaway cluster whose processes all run under callgrind."""

    def __init__(self) -> None:
        self.bindir = find_postgres_bindir()
        self.base = Path(tempfile.mkdtemp(prefix="runlane-pgcg-", dir="/tmp"))
        self.data = self.base / "data"
        self.out = self.base / "callgrind"
        self.port = _free_port()
        self._user = pwd.getpwnam(RUN_USER) if os.geteuid() == 0 else None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self.out.mkdir()
        if self._user is not None:
            for path in (self.base, self.out):
                os.chown(path, self._user.pw_uid, self._user.pw_gid)
            self.base.chmod(0o755)
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "--auth=trust", "-U", "postgres",
            "--no-sync", "--locale=C", "--encoding=UTF8",
        )  # fmt: skip
        command = self._as_user(
            "valgrind", "--tool=callgrind", "--trace-children=yes",
            f"--callgrind-out-file={self.out}/%p.out",
            str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
            "-k", str(self.base), "-c", "listen_addresses=127.0.0.1",
            "-c", "synchronous_commit=off", "-c", "autovacuum=off",
            "-c", "max_connections=50",
        )  # fmt: skip
        log = (self.base / "server.log").open("wb")
        self._process = subprocess.Popen(command, cwd=self.base, stdout=log, stderr=log)
        deadline = time.monotonic() + 180
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=5).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    log = self.base / "server.log"
                    raise RuntimeError(f"the server did not start: see {log}") from None
                time.sleep(1)

    def stop(self) -> None:
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)
        if self._process is not None:
            self._process.wait(timeout=120)
        shutil.rmtree(self.base, ignore_errors=True)

    def instructions(self, pids: list[int]) -> int:
        """The instructions of backends ``pids``, once each has exited and been written."""
        total = 0
        for pid in pids:
            path = self.out / f"{pid}.out"
            deadline = time.monotonic() + 60
            while True:
                text = path.read_text() if path.exists() else ""
                found = re.search(r"^totals: (\d+)", text, re.MULTILINE)
                if found:
                    total += int(found.group(1))
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no callgrind totals for backend {pid}")
                time.sleep(0.2)
        return total

    def _as_user(self, *command: str) -> list[str]:
        if self._user is None:
            return list(command)
        return ["runuser", "-u", RUN_USER, "--", *command]

    def _run(self, *command: str) -> None:
        subprocess.run(self._as_user(*command), cwd=self.base, check=True, capture_output=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def callgrind_server() -> Iterator[CallgrindServer]:
    server = CallgrindServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


# -- set-up ------------------------------------------------------------------------------


def _runtime(dsn: str, environment: str, application_name: str) -> Runlane:
    return Runlane(
        lane=postgres_lane(dsn, application_name=application_name),
        queues=[queue("main", default=True)],
        tasks=[noop],
        environment=environment,
    )


def prepare(dsn: str) -> None:
    """The runlane schema, the raw table and the copies of the runs table."""

    async def migrate() -> None:
        await _runtime(dsn, "setup", "bench-setup").migrate()

    asyncio.run(migrate())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RAW_TABLE)
        # One plain pending run (as a lone trigger writes it) to sort the indexes by.
        conn.execute(
            _insert_run(SCHEMA), {**_insert_params(), "id": "sample", "environment": "sample"}
        )
        indexes = conn.execute(
            "SELECT c.relname, pg_get_indexdef(c.oid), pg_get_expr(i.indpred, i.indrelid) "
            "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass AND NOT i.indisprimary",
            (f"{SCHEMA}.runlane_runs",),
        ).fetchall()
        entered = {
            name
            for name, _, predicate in indexes
            if predicate is None
            or conn.execute(
                f"SELECT ({predicate}) IS TRUE FROM {SCHEMA}.runlane_runs "
                "WHERE environment = 'sample' AND id = 'sample'"
            ).fetchone()
            == (True,)
        }
        triggers = [
            row[0]
            for row in conn.execute(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
                "WHERE tgrelid = %s::regclass AND NOT tgisinternal",
                (f"{SCHEMA}.runlane_runs",),
            ).fetchall()
        ]
        for variant in VARIANTS:
            conn.execute(
                f"CREATE SCHEMA {variant}; "
                f"CREATE TABLE {variant}.runlane_runs "
                f"(LIKE {SCHEMA}.runlane_runs INCLUDING DEFAULTS); "
                f"ALTER TABLE {variant}.runlane_runs ADD PRIMARY KEY (id, environment)"
            )
            for name, definition, _predicate in indexes:
                wanted = name == CLAIM_ORDER or (
                    variant == "lean_entered" if name in entered else variant == "lean_unentered"
                )
                if wanted:
                    conn.execute(definition.replace(f" ON {SCHEMA}.", f" ON {variant}."))
            if variant == "lean_triggers":
                for definition in triggers:
                    conn.execute(definition.replace(f" ON {SCHEMA}.", f" ON {variant}."))
        described = {
            "entered": sorted(entered | {"runlane_runs_pkey"}),
            "not entered": sorted(name for name, _, _ in indexes if name not in entered),
        }
        print(f"# indexes of runlane_runs by a plain pending run: {described}", file=sys.stderr)


def _insert_run(schema: str) -> str:
    return QUERY_TEMPLATES["insert_run"].replace("{schema}", schema)


def _insert_params() -> dict[str, Any]:
    return {
        "environment": "bench", "now": 1, "channel": "runlane_work", "task_id": "bench.noop",
        "queue": "main", "status": "queued", "payload": '{"n": 1}', "run_at": 1,
        "source": '{"kind": "trigger"}', "concurrency_key": None, "trace_carrier": None,
        "priority": 0, "priority_offset": 0,
    }  # fmt: skip


# -- workloads: each runs n operations and returns the backends that served them ---------


def raw_insert(dsn: str, n: int) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(n):
            conn.execute(RAW_INSERT, ('{"n": 1}', i), prepare=True)
        return [conn.info.backend_pid]


def statement_insert(schema: str) -> Callable[[str, int], list[int]]:
    def insert(dsn: str, n: int) -> list[int]:
        statement, params, tag = _insert_run(schema), _insert_params(), uuid.uuid4().hex
        with psycopg.connect(dsn, autocommit=True) as conn:
            for i in range(n):
                conn.execute(statement, {**params, "id": f"{tag}-{i}"}, prepare=True)
            return [conn.info.backend_pid]

    return insert


def _pids(dsn: str, application_name: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,)
        ).fetchall()
    return [row[0] for row in rows]


def lone_trigger(dsn: str, n: int) -> list[int]:
    async def run() -> list[int]:
        name = f"bench-{uuid.uuid4().hex[:12]}"
        async with _runtime(dsn, name, name) as rl:
            for i in range(n):
                await rl.trigger(noop, {"n": i})
            return _pids(dsn, name)

    return asyncio.run(run())


async def _prefilled(dsn: str, n: int, prefix: str) -> str:
    """An environment of its own holding ``n`` runs due now, created by a producer of
    another application name (so not counted with the runtime that serves them)."""
    environment = f"{prefix}-{uuid.uuid4().hex[:12]}"
    async with _runtime(dsn, environment, f"{environment}-producer") as producer:
        await producer.trigger_many(noop, [{"n": i} for i in range(n)])
    return environment


def drain(dsn: str, n: int) -> list[int]:
    async def run() -> list[int]:
        environment = await _prefilled(dsn, n, "drain")
        async with _runtime(dsn, environment, environment) as rl:
            worker = rl.worker(concurrency=100, mode=WorkerMode.DRAIN, handle_signals=False)
            await worker.run()
            if worker.executed != n:
                raise RuntimeError(f"the drain executed {worker.executed} of {n} runs")
            return _pids(dsn, environment)

    return asyncio.run(run())


def lone_attempt(dsn: str, n: int) -> list[int]:
    async def run() -> list[int]:
        environment = await _prefilled(dsn, n, "lone")
        async with _runtime(dsn, environment, environment) as rl:
            for _ in range(n):
                if await rl.execute_next() is None:
                    raise RuntimeError("execute_next found no run")
            return _pids(dsn, environment)

    return asyncio.run(run())


def per_operation(
    server: CallgrindServer,
    workload: Callable[[str, int], list[int]],
    small: int,
    large: int,
    keep: Path | None = None,
) -> float:
    """Instructions per operation; ``keep``: copy the backends' profiles there too
    (``<n>-<pid>.out``, for ``callgrind_annotate``)."""
    counts = []
    for n in (small, large):
        pids = workload(server.dsn, n)
        counts.append(server.instructions(pids))
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for pid in pids:
                shutil.copy(server.out / f"{pid}.out", keep / f"{n}-{pid}.out")
    return (counts[1] - counts[0]) / (large - small)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=SMALL)
    parser.add_argument("--large", type=int, default=LARGE)
    parser.add_argument("--drain", action="store_true", help="also count a drain per run")
    parser.add_argument("--drain-small", type=int, default=DRAIN_SMALL)
    parser.add_argument("--drain-large", type=int, default=DRAIN_LARGE)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--only", help="count only the workloads whose name contains this text (and raw insert)"
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep each workload's backend profiles under this folder (one folder each)",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH")
    # See the module docstring: only the first trigger looks for a worker standing by.
    postgres_driver.HANDOFF_RECHECK = 3600.0
    workloads: list[tuple[str, Callable[[str, int], list[int]]]] = [
        ("raw insert", raw_insert),
        ("lone trigger", lone_trigger),
        ("insert_run on the runs table (full)", statement_insert(SCHEMA)),
        *((f"insert_run on {v} ({d})", statement_insert(v)) for v, d in VARIANTS.items()),
    ]
    workloads.append(("lone attempt (execute_next: a claim and a settle of one run)", lone_attempt))
    if args.drain:
        workloads.append(("drain, per run (100 slots)", drain))
    if args.only:
        workloads = [(n, w) for n, w in workloads if n == "raw insert" or args.only in n]
    results: dict[str, float] = {}
    with callgrind_server() as server:
        prepare(server.dsn)
        for name, workload in workloads:
            keep = args.keep / re.sub(r"\W+", "-", name).strip("-") if args.keep else None
            small, large = (
                (args.drain_small, args.drain_large)
                if workload is drain
                else (args.small, args.large)
            )
            results[name] = per_operation(server, workload, small, large, keep)
            print(f"# {name}: {results[name]:,.0f}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    raw = results["raw insert"]
    print(f"{'server instructions per operation':<80} {'count':>10} {'/ raw':>7}")
    for name, count in results.items():
        print(f"{name:<80} {count:>10,.0f} {count / raw:>7.2f}")


if __name__ == "__main__":
    main()
