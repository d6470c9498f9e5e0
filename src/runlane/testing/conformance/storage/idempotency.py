"""Idempotency keys and singletons."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runlane import (
    Context,
    ManualClock,
    RetryPolicy,
    RunStatus,
    task,
)
from runlane.testing import drain
from runlane.testing.conformance.storage.support import (
    Factory,
    Order,
    _all_runs,
    _recorder,
)


async def test_an_idempotency_key_returns_the_owning_run(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    first = await rl.trigger(record, {"order_id": 1}, idempotency_key="order-1")
    again = await rl.trigger(record, {"order_id": 1}, idempotency_key="order-1")
    assert again.id == first.id
    await drain(rl)
    clock.advance("29d")
    retained = await rl.trigger(record, {"order_id": 1}, idempotency_key="order-1")
    assert retained.id == first.id and retained.status is RunStatus.SUCCEEDED
    clock.advance("2d")
    fresh = await rl.trigger(record, {"order_id": 1}, idempotency_key="order-1")
    assert fresh.id != first.id and fresh.status is RunStatus.QUEUED
    assert len(await _all_runs(rl)) == 2


async def test_idempotency_keys_can_come_from_the_payload_and_be_reset(
    make_runtime: Factory,
) -> None:
    @task("keyed", schema=Order, idempotency_key=lambda p: f"order-{p.order_id}")
    async def keyed(payload: Order, ctx: Context) -> None:
        return None

    rl = await make_runtime([keyed])
    first = await rl.trigger(keyed, {"order_id": 4})
    assert first.idempotency_key == "order-4"
    assert (await rl.trigger(keyed, {"order_id": 4})).id == first.id
    assert (await rl.trigger(keyed, {"order_id": 5})).id != first.id
    assert await rl.idempotency_keys.reset(keyed, "order-4") is True
    assert await rl.idempotency_keys.reset(keyed, "order-4") is False
    assert (await rl.trigger(keyed, {"order_id": 4})).id != first.id


async def test_a_failed_owner_releases_its_idempotency_key_at_once(make_runtime: Factory) -> None:
    @task("breaks", retry=RetryPolicy(max_attempts=1))
    async def breaks(payload: Any, ctx: Context) -> None:
        raise RuntimeError("no")

    rl = await make_runtime([breaks])
    first = await rl.trigger(breaks, None, idempotency_key="k")
    (failed,) = await drain(rl)
    assert failed.status is RunStatus.FAILED
    second = await rl.trigger(breaks, None, idempotency_key="k")
    assert second.id != first.id


async def test_active_only_idempotency_releases_when_the_owner_finishes(
    make_runtime: Factory,
) -> None:
    @task("active.keyed", idempotency_key="only-one", idempotency_key_ttl="active")
    async def active_keyed(payload: Any, ctx: Context) -> None:
        return None

    rl = await make_runtime([active_keyed])
    first = await rl.trigger(active_keyed, None)
    assert (await rl.trigger(active_keyed, None)).id == first.id
    await drain(rl)
    assert (await rl.tick()).idempotency_keys_released == 1
    assert (await rl.trigger(active_keyed, None)).id != first.id


async def test_a_singleton_key_allows_one_active_run(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    first = await rl.trigger(record, {"order_id": 1}, singleton_key="sync-account-9")
    second = await rl.trigger(record, {"order_id": 2}, singleton_key="sync-account-9")
    other = await rl.trigger(record, {"order_id": 3}, singleton_key="sync-account-10")
    assert second.id == first.id and other.id != first.id
    await drain(rl)
    after = await rl.trigger(record, {"order_id": 4}, singleton_key="sync-account-9")
    assert after.id != first.id and after.status is RunStatus.QUEUED


async def test_concurrent_triggers_with_one_key_create_one_run(make_runtime: Factory) -> None:
    _, record = _recorder()
    runtimes = [await make_runtime([record]) for _ in range(4)]
    idem = await asyncio.gather(
        *(rl.trigger(record, {"order_id": 1}, idempotency_key="same") for rl in runtimes * 3)
    )
    single = await asyncio.gather(
        *(rl.trigger(record, {"order_id": 1}, singleton_key="same") for rl in runtimes * 3)
    )
    assert len({r.id for r in idem}) == 1
    assert len({r.id for r in single}) == 1


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
