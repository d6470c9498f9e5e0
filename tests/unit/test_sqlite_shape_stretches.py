"""shape_end: the stretches of same-shaped runs a create writes with one statement."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from runlane.storage.sqlite.params import shape_end
from runlane.types.records import NewRun
from runlane.types.runs import RunSource, RunStatus

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
BASE = NewRun("r0", "t", "q", RunStatus.QUEUED, {}, "{}", NOW, RunSource())


def same_shape(a: NewRun, b: NewRun) -> bool:
    """The reference shape_end must agree with: ``a`` and ``b`` differ at most in id and
    payload (keys aside)."""
    return (
        a.task_id == b.task_id
        and a.queue == b.queue
        and a.status is b.status
        and a.run_at == b.run_at
        and a.source == b.source
        and a.concurrency_key == b.concurrency_key
        and a.rate_key == b.rate_key
        and a.trace_carrier == b.trace_carrier
        and a.request_delivery == b.request_delivery
        and a.priority_offset == b.priority_offset
        and a.priority == b.priority
    )


def _naive_end(runs: list[NewRun], start: int) -> int:
    stop = start + 1
    while stop < len(runs) and same_shape(runs[start], runs[stop]):
        stop += 1
    return stop


def test_stretches_end_where_a_field_other_than_id_and_payload_differs() -> None:
    changes = [
        {"payload": {"n": 1}, "payload_json": '{"n":1}'},  # same shape
        {"run_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)},  # equal, not identical
        {"queue": "other"},
        {"status": RunStatus.SCHEDULED},
        {"run_at": datetime(2027, 1, 1, tzinfo=UTC)},
        {"source": RunSource(run_id="x")},
        {"concurrency_key": "c"},
        {"rate_key": ""},
        {"trace_carrier": {"traceparent": "x"}},
        {"request_delivery": True},
        {"priority": 3, "priority_offset": 7},
        {"task_id": "other"},
    ]
    runs = [BASE]
    for index, change in enumerate(changes, start=1):
        runs += [dataclasses.replace(BASE, id=f"r{index}", **change)] * 2
    ends = []
    start = 0
    while start < len(runs):
        end = shape_end(runs, start)
        assert end == _naive_end(runs, start)
        ends.append(end)
        start = end
    # The equal payload and the equal due time keep the stretch going; every other
    # change starts a new one.
    assert len(ends) == len(changes) - 1
    assert ends[-1] == len(runs)
