"""The storage methods that observe runs, called directly at their edges: ``get_runs``
(``rl.runs.wait``'s re-read), ``write_progress`` and ``get_progress`` (``ctx.progress``),
the progress a settle carries (``Transition.progress`` in ``apply_transitions`` and
``apply_transitions_and_claim``), and the finished-run announcements of
:class:`~runlane.ports.storage.AnnouncesFinishedRuns`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import timedelta

import pytest

from runlane import Lane, RunStatus
from runlane.ports.storage import (
    AnnouncesFinishedRuns,
    LeaseRequest,
    NewEvent,
    ProgressWrite,
    QueuePolicy,
    RunChanges,
    SettlesAndClaims,
    Storage,
    ThroughputRow,
    Transition,
)
from runlane.testing.conformance.storage.methods import LEASE, NOW, new_run, storage
from runlane.types.runs import Run, RunEventType


async def _leased(storage: Storage, environment: str, run_id: str) -> Run:
    (outcome,) = await storage.create_runs(environment, [new_run(run_id)], NOW)
    assert outcome.created
    run = await storage.claim_run(environment, run_id, LEASE, NOW)
    assert run is not None and run.lease is not None
    return run


def _write(run: Run, fraction: float, **fields: object) -> ProgressWrite:
    assert run.lease is not None
    values: dict[str, object] = {
        "run_id": run.id,
        "lease_token": run.lease.token,
        "attempt": run.attempt,
        "fraction": fraction,
        "message": None,
        "data_json": None,
    }
    values.update(fields)
    return ProgressWrite(**values)  # type: ignore[arg-type]


def _done(run: Run, progress: ProgressWrite | None = None, token: str | None = None) -> Transition:
    """The transition that ends ``run``'s attempt as succeeded, carrying ``progress``."""
    assert run.lease is not None
    return Transition(
        run.id,
        run.event_sequence,
        RunChanges(RunStatus.SUCCEEDED, result=None),
        (NewEvent(RunEventType.SUCCEEDED),),
        lease_token=token or run.lease.token,
        progress=progress,
    )


async def _finish(storage: Storage, environment: str, run: Run) -> None:
    assert await storage.apply_transitions(environment, [_done(run)], NOW) == [True]


# -- get_runs ------------------------------------------------------------------------


async def test_get_runs_returns_the_runs_that_exist_among_the_ids(
    storage: Storage, environment: str
) -> None:
    await storage.create_runs(environment, [new_run("a"), new_run("b")], NOW)
    found = await storage.get_runs(environment, ["b", "missing", "a"])
    assert sorted(run.id for run in found) == ["a", "b"]
    assert {run.status for run in found} == {RunStatus.QUEUED}
    assert await storage.get_runs(environment, []) == []


async def test_get_runs_sees_no_run_of_another_environment(
    storage: Storage, environment: str
) -> None:
    await storage.create_runs(environment, [new_run("a")], NOW)
    assert await storage.get_runs(f"{environment}-other", ["a"]) == []


# -- write_progress, get_progress ----------------------------------------------------


async def test_write_progress_stores_the_latest_value_with_its_attempt_and_time(
    storage: Storage, environment: str
) -> None:
    run = await _leased(storage, environment, "a")
    assert await storage.get_progress(environment, ["a"]) == {}
    data = json.dumps({"page": 42, "of": 100})
    assert await storage.write_progress(environment, [_write(run, 0.25)], NOW) == 1
    later = NOW + timedelta(seconds=2)
    written = _write(run, 0.42, message="page 42 of 100", data_json=data)
    assert await storage.write_progress(environment, [written], later) == 1
    progress = (await storage.get_progress(environment, ["a", "missing"]))["a"]
    assert progress.fraction == pytest.approx(0.42)
    assert progress.message == "page 42 of 100"
    assert progress.data == {"page": 42, "of": 100}
    assert progress.attempt == run.attempt == 1
    assert progress.updated_at == later


async def test_write_progress_writes_nothing_under_a_lost_or_expired_lease(
    storage: Storage, environment: str
) -> None:
    run = await _leased(storage, environment, "a")
    stale = _write(run, 0.9, lease_token="not-the-lease")
    assert await storage.write_progress(environment, [stale], NOW) == 0
    expired_at = LEASE.expires_at + timedelta(seconds=1)
    assert await storage.write_progress(environment, [_write(run, 0.9)], expired_at) == 0
    assert await storage.get_progress(environment, ["a"]) == {}


async def test_write_progress_of_an_earlier_attempt_never_replaces_a_later_one(
    storage: Storage, environment: str
) -> None:
    run = await _leased(storage, environment, "a")
    assert await storage.write_progress(environment, [_write(run, 0.5)], NOW) == 1
    older = _write(run, 0.9, attempt=run.attempt - 1)
    assert await storage.write_progress(environment, [older], NOW) == 0
    assert (await storage.get_progress(environment, ["a"]))["a"].fraction == 0.5


async def test_write_progress_writes_nothing_for_a_finished_run_and_keeps_its_last_value(
    storage: Storage, environment: str
) -> None:
    run = await _leased(storage, environment, "a")
    assert await storage.write_progress(environment, [_write(run, 0.5)], NOW) == 1
    await _finish(storage, environment, run)
    assert await storage.write_progress(environment, [_write(run, 1.0)], NOW) == 0
    assert (await storage.get_progress(environment, ["a"]))["a"].fraction == 0.5


async def test_write_progress_writes_a_batch_and_keeps_a_runs_last_value_in_it(
    storage: Storage, environment: str
) -> None:
    first = await _leased(storage, environment, "a")
    second = await _leased(storage, environment, "b")
    batch = [_write(first, 0.1), _write(second, 0.2), _write(first, 0.3)]
    assert await storage.write_progress(environment, batch, NOW) == 2
    stored = await storage.get_progress(environment, ["a", "b"])
    assert {run_id: p.fraction for run_id, p in stored.items()} == {"a": 0.3, "b": 0.2}
    assert await storage.write_progress(environment, [], NOW) == 0


async def test_write_progress_keeps_text_and_data_as_given(
    storage: Storage, environment: str
) -> None:
    run = await _leased(storage, environment, "a")
    data = json.dumps(["é", {"nested": [1, 2.5, None, True]}, "quote ' and \" and \\"])
    write = _write(run, 1.0, message="naïve 'quoted' \u2013 ✓", data_json=data)
    assert await storage.write_progress(environment, [write], NOW) == 1
    progress = (await storage.get_progress(environment, ["a"]))["a"]
    assert progress.message == "naïve 'quoted' \u2013 ✓"
    assert progress.data == json.loads(data)
    assert progress.fraction == 1.0


async def test_get_progress_sees_no_progress_of_another_environment(
    storage: Storage, environment: str
) -> None:
    run = await _leased(storage, environment, "a")
    await storage.write_progress(environment, [_write(run, 0.5)], NOW)
    assert await storage.get_progress(f"{environment}-other", ["a"]) == {}
    assert await storage.get_progress(environment, []) == {}


async def test_prune_runs_deletes_the_progress_of_the_runs_it_deletes(
    storage: Storage, environment: str
) -> None:
    run = await _leased(storage, environment, "a")
    await storage.write_progress(environment, [_write(run, 0.5)], NOW)
    await _finish(storage, environment, run)
    later = NOW + timedelta(days=1)
    assert await storage.prune_runs(environment, later, [RunStatus.SUCCEEDED], 10) == 1
    assert await storage.get_progress(environment, ["a"]) == {}


# -- progress carried by a settle (apply_transitions, apply_transitions_and_claim) ---


async def test_apply_transitions_stores_the_progress_a_settle_carries_at_its_time(
    storage: Storage, environment: str
) -> None:
    run = await _leased(storage, environment, "a")
    other = await _leased(storage, environment, "b")
    data = json.dumps({"page": 10, "note": "naïve 'quoted'"})
    last = _write(run, 1.0, message="page 10 of 10", data_json=data)
    settled_at = NOW + timedelta(seconds=3)
    applied = await storage.apply_transitions(
        environment, [_done(run, last), _done(other)], settled_at
    )
    assert applied == [True, True]
    stored = await storage.get_progress(environment, ["a", "b"])
    assert list(stored) == ["a"]  # a settle without progress stores none
    progress = stored["a"]
    assert (progress.fraction, progress.message, progress.data) == (
        1.0,
        "page 10 of 10",
        {"page": 10, "note": "naïve 'quoted'"},
    )
    assert progress.attempt == run.attempt
    assert progress.updated_at == settled_at
    finished = await storage.get_run(environment, "a")
    assert finished is not None and finished.status is RunStatus.SUCCEEDED


async def test_a_settles_progress_replaces_the_value_written_while_the_attempt_ran(
    storage: Storage, environment: str
) -> None:
    run = await _leased(storage, environment, "a")
    assert await storage.write_progress(environment, [_write(run, 0.3)], NOW) == 1
    applied = await storage.apply_transitions(environment, [_done(run, _write(run, 0.9))], NOW)
    assert applied == [True]
    assert (await storage.get_progress(environment, ["a"]))["a"].fraction == pytest.approx(0.9)
    # The run ended: a late write of the same attempt is fenced out, the value stays.
    assert await storage.write_progress(environment, [_write(run, 0.5)], NOW) == 0
    assert (await storage.get_progress(environment, ["a"]))["a"].fraction == pytest.approx(0.9)


async def test_a_settle_whose_compare_and_set_fails_stores_none_of_its_progress(
    storage: Storage, environment: str
) -> None:
    run = await _leased(storage, environment, "a")
    assert await storage.write_progress(environment, [_write(run, 0.3)], NOW) == 1
    stale = _done(run, _write(run, 0.9, message="stale"), token="not-the-lease")
    assert await storage.apply_transitions(environment, [stale], NOW) == [False]
    kept = (await storage.get_progress(environment, ["a"]))["a"]
    assert kept.fraction == pytest.approx(0.3) and kept.message is None
    fresh = await _leased(storage, environment, "b")
    assert await storage.apply_transitions(environment, [_done(fresh)], NOW) == [True]
    late = _done(fresh, _write(fresh, 1.0))  # its sequence is the settled one's: refused
    assert await storage.apply_transitions(environment, [late], NOW) == [False]
    assert await storage.get_progress(environment, ["b"]) == {}


@pytest.mark.parametrize(
    "policy",
    [QueuePolicy("main"), QueuePolicy("main", concurrency_limit=10)],
    ids=["unbounded", "bounded"],
)
async def test_apply_transitions_and_claim_stores_the_progress_its_settles_carry(
    storage: Storage, environment: str, policy: QueuePolicy
) -> None:
    if not isinstance(storage, SettlesAndClaims):
        pytest.skip("the driver does not settle and claim in one write")
    run = await _leased(storage, environment, "a")
    await storage.create_runs(environment, [new_run("next")], NOW)
    lease = LeaseRequest("worker-2", NOW + timedelta(minutes=5))
    applied, claimed = await storage.apply_transitions_and_claim(
        environment, [_done(run, _write(run, 0.75, message="most"))], NOW, [policy], 1, lease
    )
    assert applied == [True] and [r.id for r in claimed] == ["next"]
    progress = (await storage.get_progress(environment, ["a"]))["a"]
    assert (progress.fraction, progress.message) == (0.75, "most")
    stale = _done(claimed[0], _write(claimed[0], 0.5), token="not-the-lease")
    applied, _ = await storage.apply_transitions_and_claim(
        environment, [stale], NOW, [policy], 1, lease
    )
    assert applied == [False]
    assert await storage.get_progress(environment, ["next"]) == {}


# -- listen_for_finished_runs, wait_for_finished_runs --------------------------------


async def test_wait_for_finished_runs_hears_a_run_another_storage_finished(
    storage: Storage, environment: str, lane_factory: Callable[[], Lane]
) -> None:
    assert isinstance(storage, AnnouncesFinishedRuns)
    if not await storage.listen_for_finished_runs(environment, 5.0):
        pytest.fail("the driver could not listen for finished runs")
    other = lane_factory().storage
    await other.open()
    try:
        run = await _leased(other, environment, "a")
        # Consume what creating and claiming announced (SQLite hears every commit).
        while await storage.wait_for_finished_runs(environment, 0.2):
            pass
        await _finish(other, environment, run)
        assert await storage.wait_for_finished_runs(environment, 5.0)
    finally:
        await other.close()


async def test_wait_for_finished_runs_returns_false_when_nothing_finished(
    storage: Storage, environment: str
) -> None:
    assert isinstance(storage, AnnouncesFinishedRuns)
    await storage.listen_for_finished_runs(environment, 5.0)
    while await storage.wait_for_finished_runs(environment, 0.2):
        pass
    started = asyncio.get_running_loop().time()
    assert not await storage.wait_for_finished_runs(environment, 0.3)
    assert asyncio.get_running_loop().time() - started >= 0.25


# -- record_throughput, read_throughput ----------------------------------------------


def _rows(*rows: tuple[str, int, str, int]) -> list[ThroughputRow]:
    return [
        ThroughputRow(queue, NOW + timedelta(minutes=minute), series, count)
        for queue, minute, series, count in rows
    ]


async def test_record_throughput_adds_counts_and_read_throughput_sums_them_per_period(
    storage: Storage, environment: str
) -> None:
    long_ago = NOW - timedelta(days=3)
    first = _rows(
        ("main", 0, "succeeded", 2), ("main", 1, "succeeded", 1), ("main", 1, "failed", 1)
    )
    await storage.record_throughput(environment, first, long_ago)
    again = _rows(("main", 0, "succeeded", 3), ("other", 0, "succeeded", 5))
    await storage.record_throughput(environment, again, long_ago)
    per_minute = await storage.read_throughput(environment, NOW, 60, "main")
    assert sorted((r.period, r.series, r.count) for r in per_minute) == [
        (NOW, "succeeded", 5),
        (NOW + timedelta(minutes=1), "failed", 1),
        (NOW + timedelta(minutes=1), "succeeded", 1),
    ]
    assert {r.queue for r in per_minute} == {"main"}
    every_queue = await storage.read_throughput(environment, NOW, 600, None)
    assert sorted((r.queue, r.period, r.series, r.count) for r in every_queue) == [
        ("", NOW, "failed", 1),
        ("", NOW, "succeeded", 11),
    ]


async def test_read_throughput_starts_at_since_and_aligns_periods_to_it(
    storage: Storage, environment: str
) -> None:
    rows = _rows(
        ("main", 0, "succeeded", 1), ("main", 5, "succeeded", 2), ("main", 7, "retried", 4)
    )
    await storage.record_throughput(environment, rows, NOW - timedelta(days=3))
    since = NOW + timedelta(minutes=4)
    summed = await storage.read_throughput(environment, since, 180, "main")
    assert sorted((r.period, r.series, r.count) for r in summed) == [
        (since, "succeeded", 2),
        (since + timedelta(minutes=3), "retried", 4),
    ]
    assert await storage.read_throughput(environment, NOW, 60, "missing") == []
    assert await storage.read_throughput(f"{environment}-other", NOW, 60, None) == []


async def test_record_throughput_drops_minutes_before_older_than(
    storage: Storage, environment: str
) -> None:
    rows = _rows(("main", 0, "succeeded", 1), ("main", 10, "succeeded", 1))
    await storage.record_throughput(environment, rows, NOW - timedelta(days=3))
    await storage.record_throughput(environment, [], NOW + timedelta(minutes=5))
    kept = await storage.read_throughput(environment, NOW - timedelta(hours=1), 60, "main")
    assert [(r.period, r.count) for r in kept] == [(NOW + timedelta(minutes=10), 1)]


async def test_record_throughput_from_many_writers_at_once_loses_no_count(
    storage: Storage, environment: str, lane_factory: Callable[[], Lane]
) -> None:
    others = [lane_factory().storage for _ in range(3)]
    for other in others:
        await other.open()
    try:
        writes = [
            writer.record_throughput(
                environment,
                _rows(("main", 0, "succeeded", 1), ("main", 0, "latency_03", 2)),
                NOW - timedelta(days=3),
            )
            for writer in [storage, *others]
            for _ in range(5)
        ]
        await asyncio.gather(*writes)
    finally:
        for other in others:
            await other.close()
    summed = await storage.read_throughput(environment, NOW, 60, "main")
    assert sorted((r.series, r.count) for r in summed) == [("latency_03", 40), ("succeeded", 20)]


__all__ = [name for name in dir() if name.startswith("test_")] + ["storage"]
pytestmark = pytest.mark.asyncio
