"""The robustness conformance suite: bad input gets a typed error and writes nothing,
and what is written reads back the same on every path and every lane.

Use it like the storage suite (same fixtures)::

    from runlane.testing.conformance.robustness import *  # noqa: F403

The fuzz tests are bounded (tens of examples each) so the suite stays fast.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runlane import (
    Context,
    ErrorCode,
    RunEventType,
    Runlane,
    RunlaneError,
    RunStatus,
    TaskDef,
    task,
)
from runlane.model.payloads import DEFAULT_MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH
from runlane.ports.transport import DeliveryMessage, DeliveryOutcome, IgnoredReason
from runlane.testing import TRIGGER_BATCH_SIZE, drain
from runlane.testing.conformance.storage.support import MAIN, OTHER, make_runtime

Factory = Callable[..., Awaitable[Runlane]]
#: Bounded fuzzing: enough to find an escaping exception, cheap enough for every run.
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Loose(BaseModel):
    """A schema whose field takes anything (pydantic's ``object``)."""

    data: object = None


def _tasks() -> tuple[list[Any], TaskDef[Any], TaskDef[Any]]:
    seen: list[Any] = []

    @task("robust.echo")
    async def echo(payload: Any, ctx: Context) -> Any:
        seen.append(payload)
        return payload

    @task("robust.loose", schema=Loose)
    async def loose(payload: Loose, ctx: Context) -> None:
        return None

    return seen, echo, loose


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


async def _count(rl: Runlane) -> int:
    return len((await rl.runs.list(limit=1000)).data)


async def _refused(call: Awaitable[Any], code: ErrorCode) -> RunlaneError:
    with pytest.raises(RunlaneError) as caught:
        await call
    assert caught.value.code is code, caught.value
    return caught.value


# -- payloads read back as written -----------------------------------------------------

#: Floats jsonb would turn into integers, and other values that must survive unchanged.
AS_WRITTEN = {
    "big": 1e16,
    "huge": 1.5e300,
    "whole": 2.0,
    "negative_zero": -0.0,
    "tiny": 5e-324,
    "int": 10**20,
    "nested": {"list": [1.0, 1, "1", None, True]},
    "text": "é ☃ \\u0000 literal",
}


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same JSON types throughout (``1 == 1.0`` is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


async def test_payloads_read_back_as_written_on_every_path(make_runtime: Factory) -> None:
    seen, echo, _ = _tasks()
    rl = await make_runtime([echo])
    runs = [
        await rl.trigger(echo, AS_WRITTEN),
        *await rl.trigger_many(echo, [AS_WRITTEN] * 3),
        *await rl.trigger_many(echo, [AS_WRITTEN] * 70),  # the bulk path
        await rl.trigger(echo, AS_WRITTEN, idempotency_key="as-written"),
    ]
    for run in runs:
        assert _same((await rl.runs.get(run.id)).payload, AS_WRITTEN)
    await drain(rl)
    inline = await rl.run_now(echo, AS_WRITTEN)
    assert len(seen) == len(runs) + 1
    assert all(_same(payload, AS_WRITTEN) for payload in seen)
    assert _same(inline.result, AS_WRITTEN)


# -- a bulk call of many batches -------------------------------------------------------

#: More payloads than one storage batch holds, and a few more.
LONG_CALL = TRIGGER_BATCH_SIZE * 2 + 10


async def test_a_long_bulk_call_returns_its_runs_as_stored_in_order(
    make_runtime: Factory,
) -> None:
    seen, echo, _ = _tasks()
    rl = await make_runtime([echo])
    payloads = [{"n": n} for n in range(LONG_CALL)]
    runs = await rl.trigger_many(echo, payloads)
    assert [run.payload for run in runs] == payloads
    assert len({run.id for run in runs}) == LONG_CALL
    for run in (runs[0], runs[TRIGGER_BATCH_SIZE], runs[-1]):
        assert await rl.runs.get(run.id) == run
        assert [e.type for e in await rl.runs.events(run.id)] == [RunEventType.CREATED]
    done = await drain(rl)
    assert len(done) == LONG_CALL and {run.status for run in done} == {RunStatus.SUCCEEDED}
    assert sorted(p["n"] for p in seen) == list(range(LONG_CALL))


async def test_a_long_bulk_call_writes_nothing_when_a_late_payload_is_bad(
    make_runtime: Factory,
) -> None:
    seen, echo, _ = _tasks()
    rl = await make_runtime([echo])
    good = [{"n": n} for n in range(LONG_CALL)]
    await _refused(rl.trigger_many(echo, [*good, {"x": math.nan}]), ErrorCode.PAYLOAD_INVALID)
    oversized = "x" * (DEFAULT_MAX_PAYLOAD_BYTES + 1)
    await _refused(rl.trigger_many(echo, [*good, oversized]), ErrorCode.PAYLOAD_TOO_LARGE)
    assert await _count(rl) == 0
    assert await drain(rl) == [] and seen == []


# -- payloads JSON cannot hold faithfully are refused ---------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({1: "a", "1": "b"}, id="int-and-string-key"),
        pytest.param({1: "a"}, id="int-key"),
        pytest.param({None: 1}, id="none-key"),
        pytest.param((1, 2), id="tuple"),
        pytest.param({"at": datetime(2026, 1, 1, tzinfo=UTC)}, id="datetime"),
        pytest.param(b"\xff", id="bytes"),
        pytest.param(_nested(MAX_PAYLOAD_DEPTH + 1), id="over-the-nesting-cap"),
        pytest.param(_nested(10_000), id="ten-thousand-levels"),
        pytest.param({"x": math.nan}, id="nan"),
    ],
)
async def test_payloads_json_cannot_hold_faithfully_are_refused_on_every_path(
    make_runtime: Factory, payload: Any
) -> None:
    seen, echo, _ = _tasks()
    rl = await make_runtime([echo])
    await _refused(rl.trigger(echo, payload), ErrorCode.PAYLOAD_INVALID)
    await _refused(rl.trigger_many(echo, [{"ok": 1}, payload]), ErrorCode.PAYLOAD_INVALID)
    await _refused(rl.run_now(echo, payload), ErrorCode.PAYLOAD_INVALID)
    assert await _count(rl) == 0 and seen == []


async def test_a_payload_at_the_nesting_cap_is_accepted_and_runs(make_runtime: Factory) -> None:
    seen, echo, _ = _tasks()
    rl = await make_runtime([echo])
    deepest = _nested(MAX_PAYLOAD_DEPTH)
    await rl.trigger(echo, deepest)
    (done,) = await drain(rl)
    assert done.status is RunStatus.SUCCEEDED and seen == [deepest]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xff\xfe", id="bytes-not-utf8"),
        pytest.param(_nested(10_000), id="ten-thousand-levels"),
        pytest.param(_nested(MAX_PAYLOAD_DEPTH + 1), id="over-the-nesting-cap"),
    ],
)
async def test_a_schema_field_typed_object_refuses_what_json_cannot_hold(
    make_runtime: Factory, data: Any
) -> None:
    _, _, loose = _tasks()
    rl = await make_runtime([loose])
    await _refused(rl.trigger(loose, {"data": data}), ErrorCode.PAYLOAD_INVALID)
    await _refused(rl.trigger(loose, Loose(data=data)), ErrorCode.PAYLOAD_INVALID)
    assert await _count(rl) == 0


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children),
    max_leaves=20,
)
_ANYTHING = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.binary(max_size=8)
    | st.datetimes(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children)
        | st.dictionaries(st.one_of(st.text(), st.integers(), st.none()), children, max_size=4)
    ),
    max_leaves=20,
)


@FUZZ
@given(payload=_ANYTHING | _JSON)
async def test_fuzzed_payloads_are_stored_as_written_or_refused_with_a_code(
    make_runtime: Factory, payload: Any
) -> None:
    _, echo, _ = _tasks()
    rl = await make_runtime([echo])
    before = await _count(rl)
    try:
        run = await rl.trigger(echo, payload)
    except RunlaneError as error:
        assert error.code in (ErrorCode.PAYLOAD_INVALID, ErrorCode.PAYLOAD_TOO_LARGE)
        assert await _count(rl) == before
    else:
        assert _same((await rl.runs.get(run.id)).payload, payload)


# -- run ids ---------------------------------------------------------------------------

_NO_SUCH_RUN_IDS = ["", "a\x00b", "\x00", "\ud800", "run-\udcff", "x" * 1000, 7, None]


@pytest.mark.parametrize("run_id", _NO_SUCH_RUN_IDS)
async def test_a_run_id_no_storage_can_hold_is_not_found(
    make_runtime: Factory, run_id: Any
) -> None:
    _, echo, _ = _tasks()
    rl = await make_runtime([echo])
    for call in (rl.runs.get, rl.runs.events, rl.runs.cancel, rl.runs.retry, rl.runs.rerun):
        await _refused(call(run_id), ErrorCode.RUN_NOT_FOUND)
    if isinstance(run_id, str):
        message = DeliveryMessage(environment=rl.environment, run_id=run_id, queue=MAIN.name)
        result = await rl.execute_delivery(message)
        assert result.outcome is DeliveryOutcome.IGNORED
        assert result.reason is IgnoredReason.NOT_FOUND
    assert await _count(rl) == 0


@FUZZ
@given(run_id=st.text(max_size=40) | st.text(st.characters(codec="utf-16"), max_size=4))
async def test_fuzzed_run_ids_are_not_found(make_runtime: Factory, run_id: str) -> None:
    _, echo, _ = _tasks()
    rl = await make_runtime([echo])
    await _refused(rl.runs.get(run_id), ErrorCode.RUN_NOT_FOUND)
    await _refused(rl.runs.cancel(run_id), ErrorCode.RUN_NOT_FOUND)
    message = DeliveryMessage(environment=rl.environment, run_id=run_id, queue=MAIN.name)
    assert (await rl.execute_delivery(message)).outcome is DeliveryOutcome.IGNORED


# -- durations and due times -----------------------------------------------------------


@pytest.mark.parametrize("delay", ["", [], {}, "soon", "-1s", -1, math.inf, math.nan, True])
async def test_a_delay_that_is_not_a_duration_is_refused(make_runtime: Factory, delay: Any) -> None:
    _, echo, _ = _tasks()
    rl = await make_runtime([echo])
    await _refused(rl.trigger(echo, None, delay=delay), ErrorCode.CONFIGURATION_INVALID)
    await _refused(rl.trigger_many(echo, [None], delay=delay), ErrorCode.CONFIGURATION_INVALID)
    assert await _count(rl) == 0


@pytest.mark.parametrize(
    "run_at",
    [
        datetime.min.replace(tzinfo=timezone(timedelta(hours=1))),
        datetime.max.replace(tzinfo=timezone(timedelta(hours=-1))),
        datetime(2026, 1, 1),  # naive
        "2026-01-01T00:00:00Z",
    ],
    ids=["min-plus-offset", "max-minus-offset", "naive", "string"],
)
async def test_a_run_at_outside_the_datetime_range_is_refused(
    make_runtime: Factory, run_at: Any
) -> None:
    _, echo, _ = _tasks()
    rl = await make_runtime([echo])
    await _refused(rl.trigger(echo, None, run_at=run_at), ErrorCode.CONFIGURATION_INVALID)
    await _refused(rl.runs.prune(older_than=run_at), ErrorCode.CONFIGURATION_INVALID)
    assert await _count(rl) == 0


@FUZZ
@given(
    delay=st.none()
    | st.text(max_size=8)
    | st.floats()
    | st.integers()
    | st.timedeltas()
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)
)
async def test_fuzzed_delays_schedule_a_run_or_are_refused(
    make_runtime: Factory, delay: Any
) -> None:
    _, echo, _ = _tasks()
    rl = await make_runtime([echo])
    before = await _count(rl)
    try:
        run = await rl.trigger(echo, None, delay=delay)
    except RunlaneError as error:
        assert error.code is ErrorCode.CONFIGURATION_INVALID
        assert await _count(rl) == before
    else:
        assert run.status in (RunStatus.QUEUED, RunStatus.SCHEDULED)


# -- cursors ---------------------------------------------------------------------------


@pytest.mark.parametrize("cursor", ["!!!!", "====", "", "AAAA", "%%", "YQ", "\udcff", 5])
async def test_a_cursor_the_api_did_not_make_is_refused(make_runtime: Factory, cursor: Any) -> None:
    _, echo, _ = _tasks()
    rl = await make_runtime([echo])
    await rl.trigger_many(echo, [None] * 3)
    error = await _refused(rl.runs.list(cursor=cursor), ErrorCode.CONFIGURATION_INVALID)
    assert "next_cursor" in error.message


async def test_the_cursors_the_api_makes_page_through_every_run(make_runtime: Factory) -> None:
    _, echo, _ = _tasks()
    rl = await make_runtime([echo], queues=[MAIN, OTHER])
    created = await rl.trigger_many(echo, [None] * 5)
    seen, cursor = [], None
    while True:
        page = await rl.runs.list(limit=2, cursor=cursor)
        seen += [run.id for run in page.data]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(run.id for run in created)


@FUZZ
@given(cursor=st.text(max_size=60) | st.binary(max_size=40).map(base64.urlsafe_b64encode))
async def test_fuzzed_cursors_give_a_page_or_a_typed_error(
    make_runtime: Factory, cursor: Any
) -> None:
    _, echo, _ = _tasks()
    rl = await make_runtime([echo])
    if isinstance(cursor, bytes):
        cursor = cursor.decode()
    try:
        page = await rl.runs.list(cursor=cursor)
    except RunlaneError as error:
        assert error.code is ErrorCode.CONFIGURATION_INVALID
    else:
        assert page.data == []  # nothing was triggered


__all__ = [name for name in dir() if name.startswith("test_")] + ["make_runtime", "pytestmark"]
pytestmark = pytest.mark.asyncio
