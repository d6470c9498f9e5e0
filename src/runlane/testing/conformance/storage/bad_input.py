"""Bad input changes nothing: typed errors, and nothing stored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runlane import (
    ErrorCode,
    Runlane,
    RunlaneError,
    RunStatus,
    TaskDef,
    queue,
)
from runlane.testing.conformance.storage.support import (
    OTHER,
    Factory,
    _all_runs,
    _event_types,
    _recorder,
)


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda rl, t: rl.trigger(t, {"order_id": "seven"}), ErrorCode.PAYLOAD_INVALID),
        (lambda rl, t: rl.trigger(t, {"note": "no id"}), ErrorCode.PAYLOAD_INVALID),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1, "note": "x" * 300_000}),
            ErrorCode.PAYLOAD_TOO_LARGE,
        ),
        (lambda rl, t: rl.trigger("no.such.task", {}), ErrorCode.TASK_NOT_FOUND),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, queue=queue("nowhere")),
            ErrorCode.QUEUE_NOT_FOUND,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, queue=queue("main", concurrency_limit=2)),
            ErrorCode.QUEUE_POLICY_DRIFT,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, delay="soon"),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (lambda rl, t: rl.trigger(t, {"order_id": 1}, delay=-5), ErrorCode.CONFIGURATION_INVALID),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, idempotency_key="a:b"),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, singleton_key=""),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            lambda rl, t: rl.trigger_many(t, [{"order_id": 1}, {"order_id": "bad"}]),
            ErrorCode.PAYLOAD_INVALID,
        ),
        (lambda rl, t: rl.runs.get("missing-run"), ErrorCode.RUN_NOT_FOUND),
        (lambda rl, t: rl.runs.cancel("missing-run"), ErrorCode.RUN_NOT_FOUND),
        (lambda rl, t: rl.execute_next(queues=[queue("nowhere")]), ErrorCode.QUEUE_NOT_FOUND),
        (
            lambda rl, t: rl.runs.prune(older_than="1d", statuses=["queued"]),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        # NUL characters: PostgreSQL cannot store them, so no lane accepts them.
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1, "note": "a\x00b"}),
            ErrorCode.PAYLOAD_INVALID,
        ),
        (
            lambda rl, t: rl.trigger_many(t, [{"order_id": 1}, {"order_id": 2, "note": "\x00"}]),
            ErrorCode.PAYLOAD_INVALID,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1, "note": "\ud800"}),
            ErrorCode.PAYLOAD_INVALID,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, idempotency_key="k\x00"),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, trace_carrier={"traceparent": "\x00"}),
            ErrorCode.CONFIGURATION_INVALID,
        ),
    ],
)
async def test_bad_input_raises_a_typed_error_and_writes_nothing(
    make_runtime: Factory, call: Callable[[Runlane, TaskDef[Any]], Any], code: ErrorCode
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    existing = await rl.trigger(record, {"order_id": 0})
    with pytest.raises(RunlaneError) as caught:
        await call(rl, record)
    assert caught.value.code is code
    assert caught.value.message
    runs = await _all_runs(rl)
    assert [r.id for r in runs] == [existing.id]
    assert runs[0].status is RunStatus.QUEUED
    assert await _event_types(rl, existing.id) == ["run.created"]


async def test_a_task_without_queue_and_no_default_queue_is_a_configuration_error(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record], queues=[OTHER])
    with pytest.raises(RunlaneError) as caught:
        await rl.trigger(record, {"order_id": 1})
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
    assert await _all_runs(rl) == []


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
