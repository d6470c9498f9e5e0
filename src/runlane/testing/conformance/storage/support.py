"""What the storage conformance modules share: the runtimes they build, payloads, helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from runlane import (
    Context,
    Lane,
    ManualClock,
    Runlane,
    TaskDef,
    queue,
    task,
)
from runlane.ports.transport import DeliveryMessage
from runlane.transport.memory import MemoryTransport
from runlane.types.runs import Run

MAIN = queue("main", default=True)
OTHER = queue("other")


class Order(BaseModel):
    """Payload schema used across the suite."""

    order_id: int
    note: str = ""


Factory = Callable[..., Awaitable[Runlane]]


@pytest.fixture
async def make_runtime(
    lane_factory: Callable[[], Lane], environment: str
) -> AsyncIterator[Factory]:
    """Build opened runtimes on the store under test; all are closed afterwards."""
    opened: list[Runlane] = []

    async def build(
        tasks: Sequence[TaskDef[Any]],
        *,
        queues: Sequence[Any] = (MAIN, OTHER),
        clock: ManualClock | None = None,
        env: str | None = None,
        **options: Any,
    ) -> Runlane:
        rl = Runlane(
            lane=lane_factory(),
            queues=list(queues),
            tasks=list(tasks),
            environment=env or environment,
            clock=clock,
            **options,
        )
        await rl.migrate()
        await rl.open()
        opened.append(rl)
        return rl

    yield build
    for rl in opened:
        await rl.close()


def _recorder() -> tuple[list[Any], TaskDef[Any]]:
    seen: list[Any] = []

    @task("orders.record", schema=Order)
    async def record(payload: Order, ctx: Context) -> dict[str, Any]:
        seen.append(payload)
        return {"order_id": payload.order_id, "attempt": ctx.attempt}

    return seen, record


async def _event_types(rl: Runlane, run_id: str) -> list[str]:
    return [event.type.value for event in await rl.runs.events(run_id)]


async def _all_runs(rl: Runlane) -> list[Run]:
    return (await rl.runs.list(limit=1000)).data


@pytest.fixture
async def make_transport_runtime(
    lane_factory: Callable[[], Lane], environment: str
) -> AsyncIterator[Callable[..., Awaitable[tuple[Runlane, MemoryTransport]]]]:
    """Runtimes whose lane has an in-memory transport recording published wakeups."""
    opened: list[Runlane] = []

    async def build(
        tasks: Sequence[TaskDef[Any]],
        *,
        queues: Sequence[Any] = (MAIN, OTHER),
        clock: ManualClock | None = None,
        transport: MemoryTransport | None = None,
        **options: Any,
    ) -> tuple[Runlane, MemoryTransport]:
        transport = transport or MemoryTransport(list(queues))
        rl = Runlane(
            lane=Lane(lane_factory().storage, transport),
            queues=list(queues),
            tasks=list(tasks),
            environment=environment,
            clock=clock,
            **options,
        )
        await rl.migrate()
        await rl.open()
        opened.append(rl)
        return rl, transport

    yield build
    for rl in opened:
        await rl.close()


TransportFactory = Callable[..., Awaitable[tuple[Runlane, MemoryTransport]]]


def _message(rl: Runlane, run: Run, **changes: Any) -> DeliveryMessage:
    fields: dict[str, Any] = {"environment": rl.environment, "run_id": run.id, "queue": run.queue}
    fields.update(changes)
    return DeliveryMessage(**fields)
