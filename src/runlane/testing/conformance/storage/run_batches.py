"""Creating plain runs from one batch record (an optional storage operation,
:class:`~runlane.ports.storage.CreatesRunBatches`): the same runs, rows and history
as :meth:`~runlane.ports.storage.Storage.create_runs` of the same runs one record
each."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest

from runlane import ErrorCode, RunlaneError, RunStatus
from runlane.ports.storage import CreatesRunBatches, NewRunBatch, RunFilter, Storage
from runlane.testing.conformance.storage.methods import EVERY_PLAIN_OPTION, NOW, new_run
from runlane.types.runs import RunEventType, RunSource


def _creates_batches(storage: Storage) -> CreatesRunBatches:
    if not isinstance(storage, CreatesRunBatches):
        pytest.skip("the driver does not create runs from a batch record")
    return storage


def _batch(ids: list[str], payloads: list[Any], **shared: Any) -> NewRunBatch:
    fields: dict[str, Any] = {
        "task_id": "orders.record",
        "queue": "main",
        "status": RunStatus.QUEUED,
        "run_at": NOW - timedelta(seconds=1),
        "source": RunSource(),
    }
    texts = [json.dumps(p, separators=(",", ":"), ensure_ascii=False) for p in payloads]
    return NewRunBatch(ids, payloads, texts, **{**fields, **shared})


PAYLOADS: list[Any] = [
    {"n": 1},
    {"s": 'say "hi" \\ é ☃ \u2028 tab\t', "f": [1e16, -0.0, 0.5]},
    [1, "two", None],
    "a string",
    7,
    None,
    {},
    {"nested": {"a": [{}]}},
    True,
]


@pytest.mark.parametrize(
    "shared",
    [
        {},
        EVERY_PLAIN_OPTION,
    ],
)
async def test_a_run_batch_stores_what_create_runs_stores_for_the_same_runs(
    storage: Storage, environment: str, shared: dict[str, Any]
) -> None:
    batches = _creates_batches(storage)
    # Every payload kind, and enough alike runs that a driver's bulk path is taken.
    payloads = PAYLOADS * 3
    ids = [f"b{n}" for n in range(len(payloads))]
    batch = _batch(ids, payloads, **shared)
    runs = await batches.create_run_batch(environment, batch, NOW)
    assert [run.id for run in runs] == ids
    singles = [
        new_run(
            f"s{n}",
            payload=payload,
            payload_json=text,
            **{
                name: getattr(batch, name)
                for name in ("task_id", "queue", "status", "run_at", "source")
            },
            concurrency_key=batch.concurrency_key,
            trace_carrier=batch.trace_carrier,
            priority=batch.priority,
            priority_offset=batch.priority_offset,
        )
        for n, (payload, text) in enumerate(zip(payloads, batch.payload_texts, strict=True))
    ]
    outcomes = await storage.create_runs(environment, singles, NOW)
    for run, outcome in zip(runs, outcomes, strict=True):
        assert await storage.get_run(environment, run.id) == run
        assert dataclasses.replace(outcome.run, id=run.id) == run
        events = await storage.list_run_events(environment, run.id)
        assert [event.type for event in events] == [RunEventType.CREATED]
        assert (
            events[0].data == (await storage.list_run_events(environment, outcome.run.id))[0].data
        )


async def test_an_empty_run_batch_creates_nothing(storage: Storage, environment: str) -> None:
    batches = _creates_batches(storage)
    assert await batches.create_run_batch(environment, _batch([], []), NOW) == []
    assert (await storage.list_runs(environment, RunFilter(), 10, None)).data == []


@pytest.mark.parametrize("taken", ["twice", "existing"])
async def test_a_run_batch_naming_a_taken_id_keeps_none_of_it(
    storage: Storage, environment: str, taken: str
) -> None:
    batches = _creates_batches(storage)
    if taken == "existing":
        await storage.create_runs(environment, [new_run("a")], NOW)
        ids = [f"n{n}" for n in range(20)] + ["a"]
    else:
        ids = ["a"] + [f"n{n}" for n in range(20)] + ["a"]
    with pytest.raises(RunlaneError) as refused:
        await batches.create_run_batch(environment, _batch(ids, [{"n": 1}] * len(ids)), NOW)
    assert refused.value.code is ErrorCode.STORAGE_CONFLICT
    listed = (await storage.list_runs(environment, RunFilter(), 50, None)).data
    assert [run.id for run in listed] == (["a"] if taken == "existing" else [])


__all__ = [name for name in dir() if name.startswith("test_")]
