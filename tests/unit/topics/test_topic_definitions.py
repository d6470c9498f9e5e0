"""Contract 5.2: topic() and subscription() check every rule where they are called."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from runlane import ErrorCode, RetryPolicy, RunlaneError, queue
from runlane.topics.constants import DEFAULT_SUBSCRIPTION_RETRY
from runlane.topics.definitions import (
    SubscriptionDef,
    SubscriptionMode,
    TopicDef,
    subscription,
    topic,
)


class OrderEvent(BaseModel):
    order: str


def handle(message: Any, ctx: Any) -> None:
    return None


async def handle_async(message: Any, ctx: Any) -> None:
    return None


ORDERS = topic("orders")


def _refused(call: Any, *args: Any, **kwargs: Any) -> RunlaneError:
    with pytest.raises(RunlaneError) as raised:
        call(*args, **kwargs)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    return raised.value


# --- topic (5.2) ---


def test_a_topic_keeps_its_name_schema_and_window_in_seconds() -> None:
    orders = topic("orders", schema=OrderEvent, deduplication_window="1h")

    assert (orders.name, orders.schema, orders.deduplication_window) == (
        "orders",
        OrderEvent,
        3600.0,
    )


def test_the_default_deduplication_window_is_24_hours() -> None:
    assert topic("orders").deduplication_window == 86400.0


def test_topics_compare_by_value_so_equal_definitions_are_one_topic() -> None:
    assert topic("orders", schema=OrderEvent) == topic("orders", schema=OrderEvent)
    assert topic("orders") != topic("orders", deduplication_window="1h")


def test_a_topic_is_frozen() -> None:
    with pytest.raises(AttributeError):
        ORDERS.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize("name", ["", "   ", "a:b", "x" * 256, "nul\x00", 7, None])
def test_a_topic_name_follows_the_identifier_rules(name: Any) -> None:
    _refused(topic, name)


def test_a_topic_schema_must_be_a_pydantic_model_class() -> None:
    message = _refused(topic, "orders", schema=dict).message
    assert "pydantic model class" in message


@pytest.mark.parametrize("window", ["0s", 0, "31d", timedelta(days=30, seconds=1), "soon", -1])
def test_the_deduplication_window_is_longer_than_zero_and_at_most_30_days(window: Any) -> None:
    _refused(topic, "orders", deduplication_window=window)


def test_a_window_of_exactly_30_days_is_allowed() -> None:
    assert topic("orders", deduplication_window="30d").deduplication_window == 30 * 86400.0


# --- subscription (5.2) ---


def test_subscription_with_a_handler_returns_the_definition_with_defaults() -> None:
    sub = subscription("orders.audit", topic=ORDERS, handler=handle)

    assert isinstance(sub, SubscriptionDef)
    assert sub.handler is handle
    assert sub.mode is SubscriptionMode.NONE
    assert sub.filter is None
    assert sub.key is None
    assert sub.queue is None
    assert sub.retry == DEFAULT_SUBSCRIPTION_RETRY
    assert sub.timeout is None
    assert sub.is_async is False


def test_subscription_without_a_handler_decorates_one() -> None:
    @subscription("orders.email", topic=ORDERS, mode="exclusive", key="customer")
    async def email(message: Any, ctx: Any) -> None:
        return None

    assert isinstance(email, SubscriptionDef)
    assert email.mode is SubscriptionMode.EXCLUSIVE
    assert email.key == "customer"
    assert email.is_async is True


def test_the_decorator_refuses_something_that_is_not_callable() -> None:
    decorate = subscription("orders.email", topic=ORDERS)
    _refused(decorate, "not a function")


def test_the_filter_is_normalised_to_tuples_and_an_empty_one_to_none() -> None:
    sub = subscription("s", topic=ORDERS, handler=handle, filter={"event": ["paid", "created"]})
    empty = subscription("t", topic=ORDERS, handler=handle, filter={})

    assert sub.filter == {"event": ("paid", "created")}
    assert empty.filter is None


def test_matches_applies_the_filter_to_attributes() -> None:
    sub = subscription("s", topic=ORDERS, handler=handle, filter={"event": ["paid"]})

    assert sub.matches({"event": "paid"})
    assert not sub.matches({"event": "created"})


def test_policy_options_are_kept() -> None:
    main = queue("main")
    retry = RetryPolicy(max_attempts=2)
    sub = subscription(
        "s", topic=ORDERS, handler=handle_async, queue=main, retry=retry, timeout="30s"
    )

    assert (sub.queue, sub.retry, sub.timeout, sub.is_async) == (main, retry, 30.0, True)


def test_the_mode_is_given_as_the_enum_or_its_value() -> None:
    by_value = subscription("s", topic=ORDERS, handler=handle, mode="ordered", key="k")
    by_member = subscription(
        "s", topic=ORDERS, handler=handle, mode=SubscriptionMode.ORDERED, key="k"
    )
    assert by_value.mode is by_member.mode is SubscriptionMode.ORDERED


def test_subscriptions_are_hashable_although_their_filter_is_a_dict() -> None:
    sub = subscription("s", topic=ORDERS, handler=handle, filter={"event": ["paid"]})
    assert sub in {sub}


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"topic": "orders"}, "topic must be a topic(...)"),
        ({"handler": 42}, "handler must be a function"),
        ({"mode": "fifo"}, "mode must be one of"),
        ({"mode": "exclusive"}, "needs key="),
        ({"mode": "ordered"}, "needs key="),
        ({"key": "customer"}, "takes no key"),
        ({"mode": "exclusive", "key": "runlane_id"}, "reserved"),
        ({"mode": "exclusive", "key": "has space"}, "letters, digits"),
        ({"mode": "exclusive", "key": 3}, "attribute name or a function"),
        ({"filter": {"event": "paid"}}, "must be a list of strings"),
        ({"filter": ["event"]}, "must be a mapping"),
        ({"retry": {"max_attempts": 3}}, "retry must be a RetryPolicy"),
        ({"timeout": "0s"}, "longer than zero"),
        ({"timeout": "later"}, "is not a duration"),
        ({"queue": "main"}, "queue must be a queue(...)"),
    ],
)
def test_every_rule_is_checked_at_the_call(options: dict[str, Any], says: str) -> None:
    arguments: dict[str, Any] = {"topic": ORDERS, "handler": handle, **options}
    assert says in _refused(subscription, "orders.s", **arguments).message


@pytest.mark.parametrize("name", ["", "a:b", "x" * 256, None])
def test_a_subscription_name_follows_the_identifier_rules(name: Any) -> None:
    _refused(subscription, name, topic=ORDERS, handler=handle)


def test_a_key_function_is_accepted_for_keyed_modes() -> None:
    def by_customer(message: Any) -> str | None:
        return None

    sub = subscription("s", topic=ORDERS, handler=handle, mode="ordered", key=by_customer)
    assert sub.key is by_customer


def test_a_topic_def_is_what_topic_builds() -> None:
    assert isinstance(ORDERS, TopicDef)
