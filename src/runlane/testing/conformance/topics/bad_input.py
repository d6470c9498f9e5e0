"""Refusals: bad publishes, a connection of the wrong kind, and registration rules."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import pytest

from runlane import (
    DeliveryContext,
    ErrorCode,
    Message,
    RunlaneError,
    SubscriptionMode,
    subscription,
    topic,
)
from runlane.testing.conformance.storage.support import Factory
from runlane.testing.conformance.topics.support import (
    count_runs,
    orders_topic,
    refused_with,
    runtime_for,
    subscribe,
)


async def test_bad_publishes_get_their_error_code_and_write_nothing(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    def bad_key(message: Message[Any]) -> Any:
        return 42

    keyed = subscription(
        "keyed", topic=orders, handler=noop, mode=SubscriptionMode.EXCLUSIVE, key=bad_key
    )
    rl = await runtime_for(make_runtime, [keyed])
    cases: list[tuple[Awaitable[Any], ErrorCode]] = [
        (rl.publish("nope", {"order_id": 1}), ErrorCode.TOPIC_NOT_FOUND),
        (rl.publish(topic("orders"), {"order_id": 1}), ErrorCode.CONFIGURATION_INVALID),
        (rl.publish(orders, {"order_id": 1}, message_id=""), ErrorCode.CONFIGURATION_INVALID),
        (
            rl.publish(orders, {"order_id": 1}, deduplication_key="a:b"),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            rl.publish(orders, {"order_id": 1}, trace_carrier={"a": 1}),  # type: ignore[dict-item]
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (rl.publish(orders, {"order_id": 1}, attributes={"a b": "x"}), ErrorCode.PAYLOAD_INVALID),
        (
            rl.publish(orders, {"order_id": 1}, attributes={"runlane_x": "x"}),
            ErrorCode.PAYLOAD_INVALID,
        ),
        (rl.publish(orders, {"order_id": 1}, attributes={"a": ""}), ErrorCode.PAYLOAD_INVALID),
        (rl.publish(orders, {"order_id": "x"}), ErrorCode.PAYLOAD_INVALID),
        (rl.publish(orders, {"order_id": 1, "note": "x" * 300_000}), ErrorCode.PAYLOAD_TOO_LARGE),
        (rl.publish(orders, {"order_id": 1}), ErrorCode.PAYLOAD_INVALID),  # the key function
        (rl.publish(orders, {"order_id": 1}, connection=object()), ErrorCode.PAYLOAD_INVALID),
    ]
    for call, code in cases:
        await refused_with(call, code)
    assert await count_runs(rl) == 0


async def test_a_connection_of_the_wrong_kind_is_refused(make_runtime: Factory) -> None:
    orders = orders_topic()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await runtime_for(make_runtime, [subscribe("s", noop, orders)])
    await refused_with(
        rl.publish(orders, {"order_id": 1}, connection=object()), ErrorCode.CONFIGURATION_INVALID
    )
    assert await count_runs(rl) == 0


async def test_registration_rules_are_checked_when_the_runtime_is_built(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    stranger = topic("stranger")
    cases: list[tuple[dict[str, Any], ErrorCode]] = [
        ({"topics": [orders, orders]}, ErrorCode.CONFIGURATION_INVALID),
        ({"topics": orders}, ErrorCode.CONFIGURATION_INVALID),
        (
            {"topics": [orders], "subscriptions": [subscribe("s", noop, stranger)]},
            ErrorCode.TOPIC_NOT_FOUND,
        ),
        (
            {"topics": [orders], "subscriptions": [subscribe("s", noop, orders)] * 2},
            ErrorCode.CONFIGURATION_INVALID,
        ),
    ]
    for options, code in cases:
        with pytest.raises(RunlaneError) as caught:
            await make_runtime([], **options)
        assert caught.value.code is code, (options, caught.value)


__all__ = [name for name in dir() if name.startswith("test_")]
