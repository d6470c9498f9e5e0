"""``ctx.progress`` checks the usual report inline: it must take and refuse exactly
what ``check_progress`` does, hand the sink the same fields, and return an awaitable
that is already done."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest

from runlane import ErrorCode, RunlaneError
from runlane.model.context import Context, Signal
from runlane.model.progress import MAX_PROGRESS_MESSAGE_CHARS, check_progress


class RecordingSink:
    """A progress sink that keeps what it is offered (set as ``latest`` or passed to
    ``offer``) and whether it was asked to queue a write."""

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.offered: list[tuple[float, str | None, str | None]] = []
        self.queued: Awaitable[None] | None = None
        self.queue_calls = 0
        self._done = done

    @property
    def latest(self) -> tuple[float, str | None, str | None] | None:
        return self.offered[-1] if self.offered else None

    @latest.setter
    def latest(self, report: tuple[float, str | None, str | None] | None) -> None:
        assert report is not None
        self.offered.append(report)

    def queue(self) -> Awaitable[None]:
        self.queue_calls += 1
        self.queued = self._done
        return self._done

    def offer(self, fraction: float, message: str | None, data_json: str | None) -> Awaitable[None]:
        self.latest = (fraction, message, data_json)
        return self.queued or self.queue()

    def offer_threadsafe(self, fraction: float, message: str | None, data_json: str | None) -> None:
        self.offered.append((fraction, message, data_json))


async def _heartbeat() -> None:
    return None


def _context(sink: RecordingSink) -> Context:
    return Context(
        run_id="r", task_id="t", queue="q", attempt=1, signal=Signal(), scheduled_for=None,
        trace_carrier=None, heartbeat=_heartbeat, worker_id="w", progress=sink,
    )  # fmt: skip


CASES: list[tuple[Any, Any, Any]] = [
    (0.0, None, None),
    (1.0, None, None),
    (0.5, "a" * MAX_PROGRESS_MESSAGE_CHARS, None),
    (0.5, "a" * (MAX_PROGRESS_MESSAGE_CHARS + 1), None),
    (0.5, "nul \x00 inside", None),
    (0.5, "caf\u00e9", None),
    (0.5, "lone \ud800", None),
    (1, "an int", None),
    (True, None, None),
    (1.0000001, None, None),
    (-0.0, None, None),
    (float("nan"), None, None),
    (0.5, 42, None),
    (0.5, None, {"page": 3}),
]


@pytest.mark.parametrize(("fraction", "message", "data"), CASES)
async def test_ctx_progress_takes_and_refuses_what_check_progress_does(
    fraction: Any, message: Any, data: Any
) -> None:
    done = asyncio.get_running_loop().create_future()
    done.set_result(None)
    sink = RecordingSink(done)
    ctx = _context(sink)
    try:
        expected = tuple(check_progress(fraction, message, data))
    except RunlaneError as error:
        assert error.code is ErrorCode.CONFIGURATION_INVALID
        with pytest.raises(RunlaneError) as refused:
            ctx.progress(fraction, message=message, data=data)
        assert refused.value.code is ErrorCode.CONFIGURATION_INVALID
        assert sink.offered == []
        return
    returned = ctx.progress(fraction, message=message, data=data)
    assert sink.offered == [expected]
    assert returned is done
    assert await returned is None
    assert sink.queue_calls == 1
    # A second report while the write is queued queues nothing more.
    assert ctx.progress(fraction, message=message, data=data) is done
    assert sink.offered == [expected, expected] and sink.queue_calls == 1
