"""Contract 5.3: the registration rules, checked when the runtime is built."""

from __future__ import annotations

from typing import Any

import pytest

from runlane import ErrorCode, RunlaneError, queue
from runlane.model.queue_defs import QueueDef
from runlane.topics.definitions import subscription, topic
from runlane.topics.registration import TopicRegistry, register_topics

MAIN = queue("main", default=True)
SLOW = queue("slow", concurrency_limit=2)
ORDERS = topic("orders")
PAYMENTS = topic("payments")


def handle(message: Any, ctx: Any) -> None:
    return None


def _register(
    topics: Any = (ORDERS,),
    subscriptions: Any = (),
    *,
    queues: tuple[QueueDef, ...] = (MAIN, SLOW),
    default_queue: QueueDef | None = MAIN,
    task_ids: tuple[str, ...] = ("emails.welcome",),
    stores_messages: bool = True,
) -> TopicRegistry:
    return register_topics(
        topics=topics,
        subscriptions=subscriptions,
        queues={q.name: q for q in queues},
        default_queue=default_queue,
        task_ids=task_ids,
        stores_messages=stores_messages,
    )


def _refused(code: ErrorCode, *args: Any, **kwargs: Any) -> RunlaneError:
    with pytest.raises(RunlaneError) as raised:
        _register(*args, **kwargs)
    assert raised.value.code is code, raised.value
    return raised.value


def test_subscriptions_fan_out_per_topic_in_registration_order() -> None:
    b = subscription("orders.b", topic=ORDERS, handler=handle)
    a = subscription("orders.a", topic=ORDERS, handler=handle, queue=SLOW)
    registry = _register((ORDERS, PAYMENTS), (b, a))

    assert registry.subscriptions_by_topic == {"orders": (b, a), "payments": ()}
    assert registry.queues == {"orders.b": MAIN, "orders.a": SLOW}
    assert registry.resolve_subscription("orders.a") is a


def test_no_topics_and_no_subscriptions_register_nothing() -> None:
    assert _register((), (), stores_messages=False).topics == {}


@pytest.mark.parametrize("value", [ORDERS, "orders", {"orders": ORDERS}, 3, [ORDERS, "orders"]])
def test_topics_must_be_a_list_of_topic_definitions(value: Any) -> None:
    _refused(ErrorCode.CONFIGURATION_INVALID, value)


def test_subscriptions_must_be_a_list_of_subscription_definitions() -> None:
    sub = subscription("orders.a", topic=ORDERS, handler=handle)
    _refused(ErrorCode.CONFIGURATION_INVALID, (ORDERS,), sub)
    _refused(ErrorCode.CONFIGURATION_INVALID, (ORDERS,), [sub, handle])


def test_a_topic_name_registered_twice_is_refused() -> None:
    message = _refused(ErrorCode.CONFIGURATION_INVALID, (ORDERS, topic("orders"))).message
    assert "registered twice" in message


def test_a_subscription_name_registered_twice_is_refused() -> None:
    sub = subscription("orders.a", topic=ORDERS, handler=handle)
    _refused(ErrorCode.CONFIGURATION_INVALID, (ORDERS,), (sub, sub))


def test_a_subscription_named_like_a_task_is_refused() -> None:
    sub = subscription("emails.welcome", topic=ORDERS, handler=handle)
    assert "also a task id" in _refused(ErrorCode.CONFIGURATION_INVALID, (ORDERS,), (sub,)).message


def test_a_subscription_to_an_unregistered_topic_is_topic_not_found() -> None:
    sub = subscription("payments.a", topic=PAYMENTS, handler=handle)
    error = _refused(ErrorCode.TOPIC_NOT_FOUND, (ORDERS,), (sub,))
    assert error.meta["topic"] == "payments"


def test_a_subscription_whose_topic_differs_from_the_registered_one_is_refused() -> None:
    drifted = subscription(
        "orders.a", topic=topic("orders", deduplication_window="1h"), handler=handle
    )
    assert "differs" in _refused(ErrorCode.CONFIGURATION_INVALID, (ORDERS,), (drifted,)).message


def test_a_subscription_on_an_unregistered_queue_is_queue_not_found() -> None:
    sub = subscription("orders.a", topic=ORDERS, handler=handle, queue=queue("elsewhere"))
    _refused(ErrorCode.QUEUE_NOT_FOUND, (ORDERS,), (sub,))


def test_a_subscription_whose_queue_policy_differs_is_queue_policy_drift() -> None:
    sub = subscription("orders.a", topic=ORDERS, handler=handle, queue=queue("slow"))
    _refused(ErrorCode.QUEUE_POLICY_DRIFT, (ORDERS,), (sub,))


def test_a_subscription_without_queue_needs_a_default_queue() -> None:
    sub = subscription("orders.a", topic=ORDERS, handler=handle)
    message = _refused(
        ErrorCode.CONFIGURATION_INVALID, (ORDERS,), (sub,), default_queue=None
    ).message
    assert "default queue" in message


def test_topics_on_storage_without_stores_messages_are_capability_unsupported() -> None:
    _refused(ErrorCode.CAPABILITY_UNSUPPORTED, (ORDERS,), stores_messages=False)


def test_resolve_topic_by_name_or_equal_definition() -> None:
    registry = _register()
    assert registry.resolve_topic("orders") is ORDERS
    assert registry.resolve_topic(topic("orders")) is ORDERS


def test_an_unknown_topic_is_topic_not_found_with_a_suggestion() -> None:
    with pytest.raises(RunlaneError) as raised:
        _register().resolve_topic("order")
    assert raised.value.code is ErrorCode.TOPIC_NOT_FOUND
    assert "Did you mean 'orders'?" in raised.value.message


def test_an_unknown_subscription_is_subscription_not_found() -> None:
    with pytest.raises(RunlaneError) as raised:
        _register().resolve_subscription("orders.nope")
    assert raised.value.code is ErrorCode.SUBSCRIPTION_NOT_FOUND
