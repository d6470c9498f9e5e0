"""A run built from a stored carrier's JSON text reads it as the same mapping, decoded
when first read; task code's ``ctx.trace_carrier`` likewise."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pickle
from datetime import UTC, datetime
from typing import Any

import pytest

from runlane import Context, Run, RunStatus
from runlane.model.context import Signal
from runlane.types.runs import stored_trace_carrier

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def run_with(carrier: Any) -> Run:
    return Run("r1", "default", "t", "main", RunStatus.QUEUED, {}, 1, 0, NOW, NOW, NOW, 1,
               trace_carrier=carrier)  # fmt: skip


@pytest.mark.parametrize(
    "carrier",
    [
        {"traceparent": TRACEPARENT},
        {"traceparent": TRACEPARENT, "tracestate": "vendor=value", "baggage": "user=ada"},
        {"x-custom": 'é ☃ "quoted"'},
        {},
    ],
    ids=["traceparent", "extra keys", "escapes", "empty"],
)
@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")], ids=["compact", "jsonb"])
def test_stored_text_reads_as_the_mapping_it_encodes(
    carrier: dict[str, str], separators: tuple[str, str]
) -> None:
    text = json.dumps(carrier, separators=separators)
    run = run_with(text)
    assert stored_trace_carrier(run) == text  # not decoded yet
    assert run.trace_carrier == carrier and type(run.trace_carrier) is dict
    assert stored_trace_carrier(run) == carrier  # decoded once, kept


@pytest.mark.parametrize("text", ["garbage", '{"traceparent":"}', "[1,", b"\xff"], ids=repr)
def test_stored_text_that_cannot_be_decoded_reads_as_none(text: str | bytes) -> None:
    assert run_with(text).trace_carrier is None


def test_a_run_from_text_equals_copies_and_pickles_as_one_built_from_the_mapping() -> None:
    carrier = {"traceparent": TRACEPARENT, "tracestate": "a=b"}
    from_text, from_mapping = run_with(json.dumps(carrier)), run_with(carrier)
    assert from_text == from_mapping
    assert repr(run_with(json.dumps(carrier))) == repr(from_mapping)
    assert pickle.loads(pickle.dumps(run_with(json.dumps(carrier)))) == from_mapping
    replaced = dataclasses.replace(run_with(json.dumps(carrier)), attempt=2)
    assert replaced.trace_carrier == carrier
    assert dataclasses.asdict(run_with(json.dumps(carrier)))["trace_carrier"] == carrier


def test_a_runs_carrier_stays_read_only() -> None:
    run = run_with(json.dumps({"traceparent": TRACEPARENT}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.trace_carrier = None  # type: ignore[misc]


def test_task_code_reads_the_carrier_decoded_from_the_stored_text() -> None:
    async def build() -> Context:
        async def beat() -> None:
            return None

        return Context(
            run_id="r1",
            task_id="t",
            queue="main",
            attempt=1,
            signal=Signal(),
            scheduled_for=None,
            trace_carrier=json.dumps({"traceparent": TRACEPARENT}),
            heartbeat=beat,
            worker_id="w",
        )

    ctx = asyncio.run(build())
    assert ctx.trace_carrier == {"traceparent": TRACEPARENT}
