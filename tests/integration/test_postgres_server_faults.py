"""The server misbehaving under real worker processes (SPEC-flow 10.1): restarts
(``pg_ctl restart -m fast`` and ``-m immediate``), backends terminated during a
drain, an outage, under worker processes and under an SQS consumer (on a real SQS
emulator). Each test runs a cluster of its own, so restarting it hits no other test."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support import worker_app
from tests.support.app_processes import (
    ROOT,
    app_log,
    histories,
    processes,
    wait_until_finished,
)
from tests.support.dashboard_client import dashboard_under_test
from tests.support.postgres_server import PostgresServer, PostgresUnavailable, postgres_missing

from runlane import (
    Context,
    ErrorCode,
    RunEventType,
    Runlane,
    RunlaneError,
    RunStatus,
    postgres_lane,
    postgres_sqs_lane,
    task,
)
from runlane.sqs import create_sqs_delivery_consumer, sqs_queue, sqs_transport

pytest_plugins = ["tests.support.ministack"]
pytestmark = pytest.mark.slow

#: Worker processes and slots per process in the drains below: at most this many
#: handlers are in flight when the server goes away.
WORKERS, SLOTS = 3, 4
#: A bound that only guards against a hang: the behaviour asserted is the typed error.
NEVER_HANGS = 60.0


@pytest.fixture
def cluster() -> Iterator[PostgresServer]:
    """A PostgreSQL cluster of this test's own (fsync on), stopped afterwards."""
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as error:
        postgres_missing(error.reason)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def dsn(cluster: PostgresServer) -> str:
    """The database of the worker app on this test's cluster, with the app's log."""
    url = cluster.create_database("runlane_faults")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(worker_app.LOG_TABLE)
    return url


@pytest.fixture
async def app(dsn: str, environment: str) -> AsyncIterator[Runlane]:
    """The worker app's runtime, seen from the test process."""
    rl = worker_app.build_runtime(dsn, environment)
    await rl.migrate()
    async with rl:
        yield rl


def terminate_runlane_backends(url: str) -> int:
    """``pg_terminate_backend`` on every connection runlane made (application name
    ``runlane``; the app's log and this call use others); how many were ended."""
    with psycopg.connect(url, autocommit=True, application_name="faults") as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'runlane' AND pid <> pg_backend_pid()"
        ).fetchall()
    return sum(1 for (ended,) in rows if ended)


def succeeded_more_than_once(url: str, environment: str) -> list[str]:
    """Runs whose history records more than one ``run.succeeded``, stored or implied by
    the run's row (a stored one wins over an implied one of the same sequence)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT run_id FROM ("
            " SELECT run_id, sequence FROM runlane.runlane_run_events"
            "  WHERE environment = %(env)s AND type = 'run.succeeded'"
            " UNION SELECT id, succeeded_sequence FROM runlane.runlane_runs"
            "  WHERE environment = %(env)s AND succeeded_sequence IS NOT NULL"
            ") AS s GROUP BY run_id HAVING count(*) > 1",
            {"env": environment},
        ).fetchall()
    return [row[0] for row in rows]


async def _not_succeeded(rl: Runlane, run_ids: set[str]) -> set[str]:
    # One listing of the runs in any other status, page by page, rather than a read per run.
    others = [status for status in RunStatus if status is not RunStatus.SUCCEEDED]
    found: set[str] = set()
    cursor = None
    while True:
        page = await rl.runs.list(statuses=others, limit=500, cursor=cursor)
        found.update(run.id for run in page.data if run.id in run_ids)
        if (cursor := page.next_cursor) is None:
            return found


async def _lease_expired(rl: Runlane, run_id: str) -> bool:
    """Whether an attempt of ``run_id`` lost its lease (its outcome was never written)."""
    return any(event.type is RunEventType.LEASE_EXPIRED for event in await rl.runs.events(run_id))


async def _not_succeeded_after_retries(
    rl: Runlane, run_ids: set[str], within: float = 60
) -> set[str]:
    """The runs of ``run_ids`` still not succeeded once their retries had time to run.

    The queue's success count that ``wait_until_finished`` reads includes the app's
    schedule runs, and a test handler whose own log write the fault cut retries a
    couple of seconds later: wait for those retries before judging.
    """
    deadline = time.monotonic() + within
    while (remaining := await _not_succeeded(rl, run_ids)) and time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            await rl.tick()
        await asyncio.sleep(0.5)
    return remaining


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_workers_survive_a_server_restart_and_every_run_succeeds_once(
    app: Runlane, dsn: str, environment: str, cluster: PostgresServer, mode: str
) -> None:
    runs = await app.trigger_many(worker_app.count, [None] * 3_000)
    with processes(
        "worker", WORKERS, dsn, environment, RUNLANE_APP_CONCURRENCY=str(SLOTS)
    ) as procs:
        while len(app_log(dsn, environment, "count")) < 500:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        cluster.restart(mode)
        await wait_until_finished(app, 3_000, within=240, tick=True)
        # Handlers whose own log write the restart cut are retried by these workers.
        await _not_succeeded_after_retries(app, {run.id for run in runs})
        # The workers were not restarted: they reconnected on their own.
        assert all(proc.poll() is None for proc in procs)
    executed = [row[0] for row in app_log(dsn, environment, "count")]
    ids = {run.id for run in runs}
    assert not await _not_succeeded_after_retries(app, ids), await histories(
        app, ids - set(executed)
    )
    assert succeeded_more_than_once(dsn, environment) == []
    # Delivery is at least once. A handler may run again when its outcome could not be
    # written: one in flight when the server went away (at most one per slot), or one
    # whose settle waited out the whole outage and found its lease expired (a restart
    # that outlasts the lease, as on a loaded machine; its history says so).
    twice = [run_id for run_id, n in collections.Counter(executed).items() if n > 1]
    expired = [run_id for run_id in twice if await _lease_expired(app, run_id)]
    rerun = [run_id for run_id in twice if run_id not in expired]
    assert len(rerun) <= WORKERS * SLOTS, await histories(app, rerun)


async def test_a_drain_goes_on_while_backends_are_terminated_every_300ms(
    app: Runlane, dsn: str, environment: str
) -> None:
    runs = await app.trigger_many(worker_app.count, [None] * 2_000)
    stop = threading.Event()
    terminated: list[int] = []

    def terminate_until_stopped() -> None:
        while not stop.wait(0.3):
            terminated.append(terminate_runlane_backends(dsn))

    terminator = threading.Thread(target=terminate_until_stopped, daemon=True)
    with processes("worker", WORKERS, dsn, environment, RUNLANE_APP_CONCURRENCY=str(SLOTS)):
        while not app_log(dsn, environment, "count"):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        terminator.start()
        try:
            await wait_until_finished(app, 2_000, within=240, tick=True)
            await _not_succeeded_after_retries(app, {run.id for run in runs})
        finally:
            stop.set()
            terminator.join()
    assert sum(terminated) > 0, "no backend was terminated: the test proved nothing"
    executed = [row[0] for row in app_log(dsn, environment, "count")]
    ids = {run.id for run in runs}
    assert not await _not_succeeded_after_retries(app, ids), await histories(
        app, ids - set(executed)
    )
    assert succeeded_more_than_once(dsn, environment) == []
    # A statement cut off with its connection runs again on another one at once, so
    # settles and heartbeats keep their leases: no handler runs twice.
    twice = [run_id for run_id, n in collections.Counter(executed).items() if n > 1]
    assert twice == [], await histories(app, twice)


async def test_dead_connections_are_never_handed_out_after_a_restart_or_termination(
    app: Runlane, dsn: str, cluster: PostgresServer
) -> None:
    # Warm the spare connection and the pool, then kill every connection under them.
    first = await app.trigger(worker_app.count, None)
    await app.runs.list()
    cluster.restart("fast")
    # A trigger is never replayed (whether it committed would be unknown): it succeeds
    # only because no dead connection was handed to it.
    second = await app.trigger(worker_app.count, None)
    assert terminate_runlane_backends(dsn) > 0
    await _until_terminated(dsn)
    third = await app.trigger(worker_app.count, None)
    listed = {run.id for run in (await app.runs.list()).data}
    assert listed == {first.id, second.id, third.id}


async def _until_terminated(url: str) -> None:
    """Wait until the terminated backends are gone from ``pg_stat_activity``."""
    for _ in range(200):
        with psycopg.connect(url, autocommit=True, application_name="faults") as conn:
            (left,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'runlane'"
            ).fetchone() or (0,)
        if not left:
            return
        await asyncio.sleep(0.05)


async def test_calls_during_an_outage_raise_storage_unavailable_and_leave_nothing_behind(
    app: Runlane, environment: str, cluster: PostgresServer
) -> None:
    before = await app.trigger(worker_app.count, None)
    cluster.halt()
    calls: dict[str, Any] = {
        "trigger": lambda: app.trigger(worker_app.count, None),
        "trigger_many": lambda: app.trigger_many(worker_app.count, [None] * 3),
        "runs.list": lambda: app.runs.list(),
        "runs.get": lambda: app.runs.get(before.id),
        "tick": lambda: app.tick(),
    }
    for name, call in calls.items():
        with pytest.raises(RunlaneError) as raised:
            await asyncio.wait_for(call(), NEVER_HANGS)
        assert raised.value.code is ErrorCode.STORAGE_UNAVAILABLE, name
        assert raised.value.retryable, name
    cluster.resume()
    after = None
    for _ in range(60):
        try:
            after = await app.trigger(worker_app.count, None)
            break
        except RunlaneError as error:
            assert error.code is ErrorCode.STORAGE_UNAVAILABLE
            await asyncio.sleep(0.5)
    assert after is not None, "the runtime did not work again once the server was back"
    listed = {run.id for run in (await app.runs.list()).data}
    assert listed == {before.id, after.id}


async def test_the_listener_listens_again_after_a_restart(
    app: Runlane, dsn: str, environment: str, cluster: PostgresServer
) -> None:
    storage: Any = app.storage
    # Listening: a trigger's announcement is heard.
    waiting = asyncio.ensure_future(storage.wait_for_work(environment, NEVER_HANGS))
    await asyncio.sleep(0.5)
    await app.trigger(worker_app.count, None)
    assert await waiting is True
    cluster.restart("fast")
    # The lost connection says "no news" (the worker polls meanwhile) ...
    assert await storage.wait_for_work(environment, NEVER_HANGS) is False
    # ... and the next wait listens again, on both channels, so triggers are heard.
    waiting = asyncio.ensure_future(storage.wait_for_work(environment, NEVER_HANGS))
    await asyncio.sleep(0.5)
    await app.trigger(worker_app.count, None)
    assert await waiting is True


def test_the_cli_says_in_one_line_that_storage_is_unavailable(
    dsn: str, cluster: PostgresServer, tmp_path: Path
) -> None:
    (tmp_path / "outage_app.py").write_text(
        "from runlane import Runlane, postgres_lane, queue\n"
        f"rl = Runlane(lane=postgres_lane({dsn!r}), queues=[queue('main', default=True)],"
        " tasks=[])\n"
    )
    asyncio.run(worker_app.build_runtime(dsn, "cli").migrate())
    cluster.halt()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "runlane", "runs", "list", "outage_app:rl"],
        env=env,
        capture_output=True,
        text=True,
        timeout=NEVER_HANGS,
        check=False,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "storage_unavailable" in lines[0], done.stderr


def test_the_dashboard_shows_storage_unavailable_and_recovers_by_itself(
    dsn: str, cluster: PostgresServer, tmp_path: Path
) -> None:
    with dashboard_under_test(tmp_path, lanes=lambda: postgres_lane(dsn)) as dash:
        assert dash.client.get("/").status_code == 200
        cluster.halt()
        page = dash.client.get("/")
        assert page.status_code == 503
        assert "Storage unavailable" in page.text
        assert 'http-equiv="refresh"' in page.text  # it asks again by itself
        cluster.resume()
        for _ in range(60):
            if dash.client.get("/").status_code == 200:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the dashboard did not recover once the server was back")


async def test_a_worker_started_during_an_outage_waits_for_the_server(
    app: Runlane, dsn: str, environment: str, cluster: PostgresServer
) -> None:
    await app.trigger_many(worker_app.count, [None] * 50)
    cluster.halt()
    with processes("worker", 1, dsn, environment) as (proc,):
        await asyncio.sleep(3)  # it starts, finds no server, and waits
        assert proc.poll() is None, "the worker gave up instead of waiting"
        cluster.resume()
        await wait_until_finished(app, 50, within=120)
        assert proc.poll() is None


#: Executions of ``sqs_count`` in this process, by run id.
sqs_executed: list[str] = []


@task("faults.sqs.count")
async def sqs_count(payload: Any, ctx: Context) -> None:
    """Records one execution; the short sleep keeps a batch in flight when the server goes."""
    sqs_executed.append(ctx.run_id)
    await asyncio.sleep(0.01)


def sqs_runtime(dsn: str, environment: str, client: Any, url: str, **options: Any) -> Runlane:
    """A runtime on a PostgreSQL + SQS lane whose wakeups go to the queue at ``url``."""
    sqs = sqs_transport(client=client, queues=[sqs_queue(worker_app.main, queue_url=url)])
    return Runlane(
        lane=postgres_sqs_lane(postgres=dsn, sqs=sqs, **options),
        queues=[worker_app.main],
        tasks=[sqs_count],
        environment=environment,
        lease_duration="5s",
    )


@pytest.mark.parametrize("mode", ["fast", "immediate", "outage"])
async def test_the_sqs_consumer_survives_a_server_restart_and_every_run_succeeds_once(
    dsn: str,
    environment: str,
    cluster: PostgresServer,
    sqs_client: Any,
    sqs_queue_factory: Any,
    mode: str,
) -> None:
    total, batch = 400, 10
    sqs_executed.clear()
    url = sqs_queue_factory("faults")

    # The consumer's runtime is not the test's: the test triggers and ticks (as a
    # deployment's `runlane tick` would) on one of its own.
    observer = sqs_runtime(dsn, environment, sqs_client, url)
    consuming = sqs_runtime(dsn, environment, sqs_client, url)
    await observer.migrate()
    async with observer, consuming:
        runs = await observer.trigger_many(sqs_count, [None] * total)
        consumer = create_sqs_delivery_consumer(
            client=sqs_client,
            queue_url=url,
            execute_delivery=consuming.execute_delivery,
            max_number_of_messages=batch,
            wait_time_seconds=1,
            # A wakeup whose delivery failed during the outage comes back this soon.
            visibility_timeout_seconds=5,
        )
        await consumer.start()
        try:
            while len(sqs_executed) < total // 4:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            before = len(set(sqs_executed))
            if mode == "outage":
                # Down for longer than a statement is retried: deliveries fail meanwhile.
                cluster.halt()
                await asyncio.sleep(6)
                cluster.resume()
            else:
                cluster.restart(mode)
            assert before < total, "the drain was over before the server went away"
            await wait_until_finished(observer, total, within=240, tick=True)
            # It was not restarted: it logged, backed off and carried on by itself.
            assert consumer.running, "the consumer stopped"
        finally:
            await consumer.stop()
        ids = {run.id for run in runs}
        assert not await _not_succeeded(observer, ids), await histories(
            observer, ids - set(sqs_executed)
        )
        assert succeeded_more_than_once(dsn, environment) == []
        # At least once: only handlers in flight when the server went away may have run
        # again (their outcome could not be written), at most one batch of them.
        twice = [run_id for run_id, n in collections.Counter(sqs_executed).items() if n > 1]
        assert len(sqs_executed) - len(set(sqs_executed)) <= batch, await histories(observer, twice)


@contextlib.contextmanager
def ticking_every(app: str, every: str, pythonpath: Path, logs: Path) -> Iterator[Any]:
    """``runlane tick APP --every EVERY`` in a process of its own, stdout and stderr in
    ``logs``/out and ``logs``/err, stopped (SIGTERM) at the end."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pythonpath), str(ROOT)])}
    with (logs / "out").open("w") as out, (logs / "err").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runlane", "tick", app, "--every", every],
            env=env,
            stdout=out,
            stderr=err,
        )
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=NEVER_HANGS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def test_tick_every_started_during_an_outage_waits_for_the_server(
    app: Runlane, dsn: str, environment: str, cluster: PostgresServer, tmp_path: Path
) -> None:
    (tmp_path / "tick_app.py").write_text(
        "from tests.support.worker_app import build_runtime\n"
        f"rl = build_runtime({dsn!r}, {environment!r})\n"
    )
    errors = tmp_path / "err"
    cluster.halt()
    with ticking_every("tick_app:rl", "200ms", tmp_path, tmp_path) as ticking:
        await asyncio.sleep(3)  # it starts, finds no server, and waits
        assert ticking.poll() is None, f"tick gave up: {errors.read_text()}"
        cluster.resume()
        # Its passes run once the server is back: the app's every-second schedule
        # fires, which only a tick does here.
        deadline = time.monotonic() + NEVER_HANGS
        listed: list[Any] = []
        while not listed and time.monotonic() < deadline:
            with contextlib.suppress(RunlaneError):
                listed = (await app.runs.list()).data
            await asyncio.sleep(0.2)
        assert {run.task_id for run in listed} == {"every.second"}, errors.read_text()
        assert ticking.poll() is None
    assert "storage unavailable at start" in errors.read_text()
    assert "tick #1" in (tmp_path / "out").read_text()


async def test_the_sqs_consumer_backs_off_while_storage_is_unavailable_and_carries_on(
    dsn: str,
    environment: str,
    cluster: PostgresServer,
    sqs_client: Any,
    sqs_queue_factory: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    total = 50
    sqs_executed.clear()
    url = sqs_queue_factory("faults")
    observer = sqs_runtime(dsn, environment, sqs_client, url)
    # A short wait for a connection, so that deliveries fail fast during the outage.
    consuming = sqs_runtime(dsn, environment, sqs_client, url, pool_timeout=0.5)
    await observer.migrate()
    async with observer:
        runs = await observer.trigger_many(sqs_count, [None] * total)
    cluster.halt()
    consumer = create_sqs_delivery_consumer(
        client=sqs_client,
        queue_url=url,
        execute_delivery=consuming.execute_delivery,
        wait_time_seconds=1,
        # What could not be executed during the outage comes back this soon.
        visibility_timeout_seconds=3,
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + NEVER_HANGS
        while caplog.text.count("storage unavailable; receiving again") < 2:
            assert time.monotonic() < deadline, "the consumer did not back off"
            await asyncio.sleep(0.1)
        assert consumer.running, "the consumer stopped instead of waiting"
        assert sqs_executed == []
        cluster.resume()
        async with observer:
            await wait_until_finished(observer, total, within=120, tick=True)
            ids = {run.id for run in runs}
            assert not await _not_succeeded(observer, ids)
        assert consumer.running
    finally:
        await consumer.stop()
        await consuming.close()
    assert sorted(sqs_executed) == sorted(run.id for run in runs)
    assert succeeded_more_than_once(dsn, environment) == []
