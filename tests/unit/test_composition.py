"""The runtime composes its collaborators; each can be built and used without it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runlane import Context, Observer, QueueDef, TaskDef, queue, sqlite_lane, task
from runlane.core.maintenance import Maintenance
from runlane.core.observing import ObservedRuntime, Observers
from runlane.core.producing import Producer, RunWriter
from runlane.core.registry import Registry
from runlane.core.store import StoreScope
from runlane.ports.lane import Lane, LaneConnection
from runlane.testing import ManualClock
from runlane.types.runs import RunStatus, TickReport

main = queue("main", default=True)


@task(id="composed", queue=main)
def composed(payload: object, ctx: Context) -> None:
    """Does nothing."""


class Registered:
    """Just what an observer is shown of a runtime: no Runlane behind it."""

    def __init__(self, registry: Registry) -> None:
        self.environment = "composed"
        self._registry = registry

    @property
    def tasks(self) -> Mapping[str, TaskDef[Any]]:
        return self._registry.tasks

    @property
    def queues(self) -> Mapping[str, QueueDef]:
        return self._registry.queues


class Watching(Observer):
    def __init__(self) -> None:
        self.environment = ""
        self.triggered_ids: list[str] = []
        self.ticks: list[TickReport] = []

    def attached(self, runtime: ObservedRuntime) -> None:
        self.environment = runtime.environment

    def triggered(self, runs: Any) -> None:
        self.triggered_ids += [run.id for run in runs]

    def ticked(self, report: TickReport) -> None:
        self.ticks.append(report)


async def test_a_producer_built_without_a_runtime_writes_runs_and_tells_its_observers(
    tmp_path: Path,
) -> None:
    lane = sqlite_lane(tmp_path / "composed.db")
    await lane.storage.migrate()
    registry = Registry([main], [composed])
    observer = Watching()
    observers = Observers(Registered(registry), [observer])
    store = StoreScope(lane.storage, "composed", ManualClock())
    connection = LaneConnection(lane)
    writer = RunWriter(
        store, dispatcher=None, eager_dispatch=True, lane=connection, on_created=lambda: None
    )
    producer = Producer(
        registry, writer, observers, store.clock, max_payload_bytes=1024, transport=False
    )
    try:
        run = await producer.trigger(
            "composed",
            {"n": 1},
            queue=None,
            delay=None,
            run_at=None,
            idempotency_key=None,
            singleton_key=None,
            concurrency_key=None,
            trace_carrier=None,
            connection=None,
        )
        assert connection.is_open
        stored = await lane.storage.get_run("composed", run.id)
        assert stored is not None and stored.status is RunStatus.QUEUED
        assert observer.environment == "composed"
        assert observer.triggered_ids == [run.id]

        report = await Maintenance((), observers, connection.open).tick()
        assert observer.ticks == [report]
    finally:
        await connection.close()
    assert not connection.is_open


class CountingLane(Lane):
    opened = 0

    async def open(self) -> None:
        type(self).opened += 1
        await asyncio.sleep(0.01)  # callers arriving meanwhile must wait, not open again
        await super().open()


async def test_a_lane_connection_opens_its_lane_once_for_concurrent_callers(
    tmp_path: Path,
) -> None:
    base = sqlite_lane(tmp_path / "once.db")
    connection = LaneConnection(CountingLane(base.storage))
    await asyncio.gather(*(connection.open() for _ in range(5)))
    await connection.open()
    try:
        assert CountingLane.opened == 1
        assert connection.is_open
    finally:
        await connection.close()
