"""The queue-pause storage methods called directly (``pause_queue``, ``resume_queue``,
``list_queue_pauses``), each at its edges. The ``storage`` fixture is :mod:`.methods`'s."""

from __future__ import annotations

from datetime import timedelta

from runlane.ports.storage import QueuePause, QueuePolicy, Storage
from runlane.testing.conformance.storage.methods import NOW, QUEUE, new_run


async def test_list_queue_pauses_is_empty_for_an_environment_without_pauses(
    storage: Storage, environment: str
) -> None:
    assert await storage.list_queue_pauses(environment) == []


async def test_pause_queue_stores_the_pause_and_a_second_pause_keeps_the_first(
    storage: Storage, environment: str
) -> None:
    first = await storage.pause_queue(environment, "main", "incident 7", NOW)
    assert first == QueuePause("main", NOW, "incident 7")
    again = await storage.pause_queue(environment, "main", None, NOW + timedelta(minutes=1))
    assert again == first
    assert await storage.list_queue_pauses(environment) == [first]


async def test_pauses_are_per_environment_and_listed_by_queue_name(
    storage: Storage, environment: str
) -> None:
    await storage.pause_queue(environment, "zeta", None, NOW)
    await storage.pause_queue(environment, "alpha", None, NOW)
    await storage.pause_queue(f"{environment}-other", "main", None, NOW)
    assert [p.queue for p in await storage.list_queue_pauses(environment)] == ["alpha", "zeta"]
    assert [p.queue for p in await storage.list_queue_pauses(f"{environment}-other")] == ["main"]


async def test_resume_queue_drops_the_pause_and_says_whether_there_was_one(
    storage: Storage, environment: str
) -> None:
    await storage.pause_queue(environment, "main", None, NOW)
    await storage.pause_queue(environment, "other", None, NOW)
    assert await storage.resume_queue(environment, "main") is True
    assert await storage.resume_queue(environment, "main") is False
    assert [p.queue for p in await storage.list_queue_pauses(environment)] == ["other"]


async def test_resume_queue_forgets_the_delivery_requests_of_the_queues_waiting_runs_only(
    storage: Storage, environment: str
) -> None:
    await storage.create_runs(
        environment, [new_run("paused-1"), new_run("other-1", queue="other")], NOW
    )
    other = QueuePolicy("other")
    assert await storage.request_due_deliveries(environment, [QUEUE, other], NOW, 10) == 2
    await storage.pause_queue(environment, "main", None, NOW)
    # Resuming a queue that is not paused leaves its requests alone.
    assert await storage.resume_queue(environment, "other") is False
    assert await storage.resume_queue(environment, "main") is True
    # The resumed queue's run is requested again; the other queue's still has its request.
    assert await storage.request_due_deliveries(environment, [QUEUE, other], NOW, 10) == 1
    assert await storage.request_due_deliveries(environment, [QUEUE, other], NOW, 10) == 0


__all__ = [name for name in dir() if name.startswith("test_")]
