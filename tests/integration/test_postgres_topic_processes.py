"""Topics across four worker processes on one PostgreSQL (contract 5.7, issue 12).

Workers are ``tests.support.topic_app`` processes; their handlers log when each
delivery starts and ends, so exclusivity and order are measured from inside the
handlers, not read back from run statuses.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
from tests.support import topic_app, worker_app

from runlane import Runlane, RunStatus
from runlane.storage.postgres import PostgresStorage

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def app(postgres_dsn: str, environment: str) -> AsyncIterator[Runlane]:
    """The topic app's runtime, seen from the test process (it publishes and checks)."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(worker_app.LOG_TABLE)
    rl = topic_app.build_runtime(postgres_dsn, environment)
    await rl.migrate()
    async with rl:
        yield rl


class Workers:
    """Worker processes of the topic app; more can be started while the test runs."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, role: str = "worker") -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.topic_app"],
            cwd=ROOT,
            env={**self.env, "RUNLANE_APP_ROLE": role},
        )
        self.procs.append(proc)
        return proc


@contextmanager
def workers(count: int, dsn: str, environment: str, **extra: str) -> Iterator[Workers]:
    """``count`` worker processes of the topic app; any left running are stopped."""
    group = Workers(
        {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "RUNLANE_APP_DSN": dsn,
            "RUNLANE_APP_ENV": environment,
            **extra,
        }
    )
    for _ in range(count):
        group.start()
    try:
        yield group
    finally:
        running = [proc for proc in group.procs if proc.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        for proc in running:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _publish(rl: Runlane, customers: int, per_customer: int) -> int:
    """Messages interleaved across customers, each customer's numbered 0, 1, 2, ...
    (each one published after the previous returned). Returns the deliveries made."""
    deliveries = 0
    for n in range(per_customer):
        for c in range(customers):
            receipt = await rl.publish(topic_app.orders, {"n": n}, attributes={"customer": f"c{c}"})
            deliveries += len(receipt.runs)
    return deliveries


async def _wait_until_succeeded(rl: Runlane, total: int, within: float) -> None:
    deadline = time.monotonic() + within
    tick_error: Exception | None = None
    while time.monotonic() < deadline:
        # Recover leases of killed workers from here too (any process may tick). A tick
        # may lose a race with the workers' own; one that keeps failing is the cause
        # the timeout below reports.
        try:
            await rl.tick()
            tick_error = None
        except Exception as error:
            tick_error = error
        stats = await rl.queue_stats()
        if sum(s.counts.get(RunStatus.SUCCEEDED, 0) for s in stats) >= total:
            return
        await asyncio.sleep(0.3)
    raise AssertionError(
        f"deliveries did not finish within {within}s: {await rl.queue_stats()}; "
        f"last tick error: {tick_error!r}"
    )


Event = tuple[datetime, str, str, int, str, int]  # at, phase, run_id, n, key, pid


def _events(dsn: str, environment: str, kind: str) -> list[Event]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT at, phase, run_id, key, pid FROM app_log"
            " WHERE environment = %s AND kind = %s ORDER BY at",
            (environment, kind),
        ).fetchall()
    events = []
    for at, phase, run_id, key_n, pid in rows:
        key, _, n = key_n.rpartition("/")
        events.append((at, phase, run_id, int(n), key, pid))
    # At one instant, an end comes before a start.
    return sorted(events, key=lambda e: (e[0], e[1] != "end"))


def _peaks(events: list[Event], killed: frozenset[int] = frozenset()) -> tuple[dict[str, int], int]:
    """The most deliveries in flight at once per key, and over all keys. Attempts of a
    killed process never end; they are left out."""
    ended = {(e[2], e[5]) for e in events if e[1] == "end"}
    current: dict[str, int] = defaultdict(int)
    peaks: dict[str, int] = defaultdict(int)
    total = peak_total = 0
    for _, phase, run_id, _, key, pid in events:
        if pid in killed and (run_id, pid) not in ended:
            continue
        step = 1 if phase == "start" else -1
        current[key] += step
        total += step
        peaks[key] = max(peaks[key], current[key])
        peak_total = max(peak_total, total)
    return dict(peaks), peak_total


def _starts_per_key(events: list[Event]) -> dict[str, list[int]]:
    starts: dict[str, list[int]] = defaultdict(list)
    for _, phase, _, n, key, _ in events:
        if phase == "start":
            starts[key].append(n)
    return dict(starts)


def _in_flight(dsn: str, environment: str) -> set[int]:
    """The processes inside a handler now (a start logged without its end)."""
    events = _events(dsn, environment, "exclusive") + _events(dsn, environment, "ordered")
    ended = {(e[2], e[5]) for e in events if e[1] == "end"}
    return {e[5] for e in events if e[1] == "start" and (e[2], e[5]) not in ended}


async def test_four_processes_never_hold_one_exclusive_key_twice_and_keep_ordered_keys_in_order(
    app: Runlane, postgres_dsn: str, environment: str
) -> None:
    customers, per_customer = 3, 40
    hold = {"RUNLANE_APP_HOLD": "0.002", "RUNLANE_APP_RETRY_FIRST": "0.003"}
    with workers(4, postgres_dsn, environment, **hold) as group:
        # Two more processes execute deliveries as transport wakeups would, picked at
        # random: their claim_run races the workers' polling claims on every key.
        group.start("wakeups")
        group.start("wakeups")
        # Published while the workers run: each publish wakes all of them at once, so
        # their claims of one key meet.
        total = await _publish(app, customers, per_customer)
        assert total == 2 * customers * per_customer
        await _wait_until_succeeded(app, total, within=300)
    for kind in ("exclusive", "ordered"):
        events = _events(postgres_dsn, environment, kind)
        # Every delivery's first attempt asked for a retry: two attempts each.
        assert len([e for e in events if e[1] == "start"]) == 2 * customers * per_customer, kind
        peaks, peak_total = _peaks(events)
        assert max(peaks.values()) == 1, (kind, peaks)
        assert peak_total > 1, f"{kind}: keys were serialised instead of running side by side"
        assert len({e[5] for e in events}) > 1, f"{kind}: one process did all the work"
    starts = _starts_per_key(_events(postgres_dsn, environment, "ordered"))
    # A head waiting for its retry holds its key: each key's attempts go 0, 0, 1, 1, ...
    in_order = [n for n in range(per_customer) for _ in range(2)]
    assert starts == {f"c{c}": in_order for c in range(customers)}


async def test_killed_workers_lose_no_delivery_and_none_succeeds_twice(
    app: Runlane, postgres_dsn: str, environment: str
) -> None:
    customers, per_customer = 4, 25
    total = await _publish(app, customers, per_customer)
    with workers(4, postgres_dsn, environment, RUNLANE_APP_HOLD="0.2") as group:
        victims = {proc.pid for proc in group.procs[:2]}
        deadline = time.monotonic() + 60
        # Kill the two workers once each is inside a handler.
        while not victims <= _in_flight(postgres_dsn, environment):
            assert time.monotonic() < deadline, "the workers never got deliveries"
            await asyncio.sleep(0.02)
        killed = set()
        for proc in group.procs[:2]:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            assert proc.returncode == -signal.SIGKILL
            killed.add(proc.pid)
        group.start()
        group.start()
        await _wait_until_succeeded(app, total, within=300)
    # Every delivery succeeded exactly once (one run.succeeded event each, stored or
    # implied by the run's row: a stored one wins over an implied one of its sequence).
    storage = app.storage
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(postgres_dsn) as conn:
        succeeded = conn.execute(
            f"SELECT run_id, count(*) FROM ("
            f" SELECT run_id, sequence FROM {storage.schema}.runlane_run_events"
            "  WHERE environment = %(env)s AND type = 'run.succeeded'"
            f" UNION SELECT id, succeeded_sequence FROM {storage.schema}.runlane_runs"
            "  WHERE environment = %(env)s AND succeeded_sequence IS NOT NULL"
            ") AS s GROUP BY run_id",
            {"env": environment},
        ).fetchall()
    assert len(succeeded) == total and {n for _, n in succeeded} == {1}
    cut_short = 0
    for kind in ("exclusive", "ordered"):
        events = _events(postgres_dsn, environment, kind)
        peaks, _ = _peaks(events, frozenset(killed))
        assert max(peaks.values()) == 1, (kind, peaks)
        ended = {(e[2], e[5]) for e in events if e[1] == "end"}
        cut_short += sum(e[1] == "start" and (e[2], e[5]) not in ended for e in events)
    assert cut_short, "the kills should have caught attempts in flight"
    # ORDERED keys ran in publish order: an attempt cut short by the kill runs again
    # before anything after it.
    for key, ns in _starts_per_key(_events(postgres_dsn, environment, "ordered")).items():
        assert ns == sorted(ns), (key, ns)
        assert sorted(set(ns)) == list(range(per_customer)), key
