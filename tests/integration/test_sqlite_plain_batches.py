"""SQLite's bulk insert of plain runs: the payload column holds exactly the text core
encoded, whichever form the batch's ``:rows`` took (one JSON object keyed by id, or
``[id, text]`` pairs when a payload is a JSON scalar or an id needs escaping); a
batch inside a caller's transaction shares its fate."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from runlane import Context, ErrorCode, Runlane, RunlaneError, queue, sqlite_lane, task
from runlane.ports.storage import CreatesRunBatches, RunFilter
from runlane.storage.sqlite.params import plain_rows, plain_statement
from runlane.types.records import NewRun, NewRunBatch
from runlane.types.runs import RunSource, RunStatus

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@contextmanager
def _callers_transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """An application's own connection to the file, inside a transaction it began."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
    finally:
        conn.close()


AWKWARD: list[Any] = [
    {"note": 'tab\t nl\n quote" backslash\\ slash/ ü \u2028 \U0001f600 \x1f'},
    {"floats": [1e16, 1.5e-300, -0.0, 0.1, 1e100], "big": 10**30, "neg": -(2**63)},
    {"nested": {"a": [[], {}, [None, True, False]], "": ""}},
    {},
    [1, "two", {"three": 3}],
    [],
]


def _encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _runs(payloads: list[Any], ids: list[str]) -> list[NewRun]:
    return [
        NewRun(run_id, "t", "main", RunStatus.QUEUED, payload, _encode(payload), NOW, RunSource())
        for run_id, payload in zip(ids, payloads, strict=True)
    ]


@pytest.mark.parametrize(
    ("extra_payload", "extra_id", "statement"),
    [
        ({"plain": 1}, "plain-id", "insert_plain_runs_by_id"),
        ("a scalar", "scalar-id", "insert_plain_runs"),
        (7, "number-id", "insert_plain_runs"),
        (None, "null-id", "insert_plain_runs"),
        ({"plain": 1}, 'id with "quote"', "insert_plain_runs"),
        ({"plain": 1}, "id with \\ backslash", "insert_plain_runs"),
    ],
)
async def test_plain_batches_store_the_payload_text_as_encoded(
    tmp_path: Path, extra_payload: Any, extra_id: str, statement: str
) -> None:
    payloads = [*AWKWARD, *AWKWARD, extra_payload]
    ids = [f"run-{index}" for index in range(len(payloads) - 1)] + [extra_id]
    runs = _runs(payloads, ids)
    rows = plain_rows(ids, [new.payload_json for new in runs])
    assert plain_statement(rows) == statement
    path = tmp_path / "app.db"
    storage = sqlite_lane(str(path)).storage
    await storage.migrate()
    await storage.open()
    try:
        outcomes = await storage.create_runs("env", runs, NOW)
        assert [outcome.run.payload for outcome in outcomes] == payloads
        for new in runs[:3]:
            assert await storage.get_run("env", new.id) == next(
                outcome.run for outcome in outcomes if outcome.run.id == new.id
            )
    finally:
        await storage.close()
    with sqlite3.connect(path) as db:
        stored = dict(db.execute("SELECT id, payload FROM runlane_runs").fetchall())
    assert stored == {new.id: new.payload_json for new in runs}


main = queue("main", default=True)


@task("batches.noop", queue=main)
async def noop(payload: Any, ctx: Context) -> None:
    return None


@pytest.mark.parametrize("commit", [True, False])
async def test_trigger_many_inside_a_callers_transaction_keeps_its_fate(
    tmp_path: Path, commit: bool
) -> None:
    path = tmp_path / "app.db"
    async with Runlane(lane=sqlite_lane(str(path)), queues=[main], tasks=[noop]) as rl:
        await rl.migrate()
        with _callers_transaction(path) as conn:
            conn.execute("CREATE TABLE orders (id TEXT)")
            runs = await rl.trigger_many(noop, [{"n": n} for n in range(1500)], connection=conn)
            assert len(runs) == 1500
            conn.execute("COMMIT" if commit else "ROLLBACK")
        with sqlite3.connect(path) as db:
            (count,) = db.execute("SELECT count(*) FROM runlane_runs").fetchone()
        assert count == (1500 if commit else 0)
        if commit:
            assert await rl.runs.get(runs[700].id) == runs[700]


async def test_a_batch_with_a_taken_id_inside_a_callers_transaction_undoes_only_itself(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    storage = sqlite_lane(str(path)).storage
    await storage.migrate()
    await storage.open()
    try:
        batches = cast(CreatesRunBatches, storage)
        first = NewRunBatch(
            ["a", "b"], [{}, {}], ["{}", "{}"], "t", "main", RunStatus.QUEUED, NOW, RunSource()
        )
        again = dataclasses.replace(first, ids=["c", "a"])
        with _callers_transaction(path) as conn:
            await batches.create_run_batch("env", first, NOW, connection=conn)
            with pytest.raises(RunlaneError) as refused:
                await batches.create_run_batch("env", again, NOW, connection=conn)
            assert refused.value.code is ErrorCode.STORAGE_CONFLICT
            conn.execute("COMMIT")
        listed = await storage.list_runs("env", RunFilter(), 10, None)
        assert sorted(run.id for run in listed.data) == ["a", "b"]
    finally:
        await storage.close()


@pytest.mark.parametrize("size", [0, 2, 9])
@pytest.mark.parametrize("keyed", [False, True])
async def test_create_runs_with_a_taken_id_inside_a_callers_transaction_undoes_only_itself(
    tmp_path: Path, size: int, keyed: bool
) -> None:
    """Written row by row (a few runs, or keyed ones) or in one statement, a call that
    fails on a taken id leaves none of its runs in the caller's transaction, whose own
    writes go on."""
    path = tmp_path / "app.db"
    storage = sqlite_lane(str(path)).storage
    await storage.migrate()
    await storage.open()

    def new(run_id: str, key: str) -> NewRun:
        run = NewRun(run_id, "t", "main", RunStatus.QUEUED, {}, "{}", NOW, RunSource())
        return dataclasses.replace(run, idempotency_key=key) if keyed else run

    try:
        with _callers_transaction(path) as conn:
            conn.execute("CREATE TABLE orders (id TEXT)")
            await storage.create_runs("env", [new("taken", "first")], NOW, connection=conn)
            # A new key each (no run to return instead), the last one's id taken.
            again = [new(f"new-{n}", f"k-{n}") for n in range(size)] + [new("taken", "last")]
            with pytest.raises(RunlaneError) as refused:
                await storage.create_runs("env", again, NOW, connection=conn)
            assert refused.value.code is ErrorCode.STORAGE_CONFLICT
            assert conn.in_transaction
            conn.execute("INSERT INTO orders VALUES ('o-1')")
            conn.execute("COMMIT")
        listed = await storage.list_runs("env", RunFilter(), 20, None)
        assert [run.id for run in listed.data] == ["taken"]
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT id FROM orders").fetchall() == [("o-1",)]
    finally:
        await storage.close()


async def test_a_keyed_trigger_inside_a_callers_transaction_reads_its_key_back(
    tmp_path: Path,
) -> None:
    """A key is looked up on the caller's connection, whatever its row factory."""
    path = tmp_path / "app.db"
    async with Runlane(lane=sqlite_lane(str(path)), queues=[main], tasks=[noop]) as rl:
        await rl.migrate()
        with _callers_transaction(path) as conn:
            first = await rl.trigger(noop, {"n": 1}, idempotency_key="order-1", connection=conn)
            again = await rl.trigger(noop, {"n": 1}, idempotency_key="order-1", connection=conn)
            conn.execute("COMMIT")
        assert again.id == first.id
        assert await rl.runs.get(first.id) == first
