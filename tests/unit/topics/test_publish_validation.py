"""Contract 5.4: publish validation (first failure wins), keys (5.2.2), deduplication
windows (5.4.3) and message-id reuse (5.4.4), before anything is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from runlane import ErrorCode, RunlaneError, queue
from runlane.topics.definitions import SubscriptionMode, subscription, topic
from runlane.topics.messages import Message
from runlane.topics.publishing import (
    ValidatedPublish,
    canonical_envelope,
    check_envelope_reuse,
    envelope_of,
    is_within_window,
    validate_publish,
)
from runlane.topics.registration import TopicRegistry, register_topics

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
MAIN = queue("main", default=True)


class OrderEvent(BaseModel):
    order: str
    customer: str


def handle(message: Any, ctx: Any) -> None:
    return None


ORDERS = topic("orders", schema=OrderEvent)
LOGS = topic("logs")
AUDIT = subscription("orders.audit", topic=ORDERS, handler=handle)
EMAIL = subscription(
    "orders.email",
    topic=ORDERS,
    handler=handle,
    filter={"event": ["paid"]},
    mode=SubscriptionMode.EXCLUSIVE,
    key="customer",
)
LEDGER = subscription(
    "orders.ledger",
    topic=ORDERS,
    handler=handle,
    mode=SubscriptionMode.ORDERED,
    key=lambda message: message.payload.customer,
)
REGISTRY = register_topics(
    topics=[ORDERS, LOGS],
    subscriptions=[AUDIT, EMAIL, LEDGER],
    queues={"main": MAIN},
    default_queue=MAIN,
    task_ids=(),
    stores_messages=True,
)
ORDER = {"order": "o-1", "customer": "c-1"}


def _publish(topic_: Any = ORDERS, payload: Any = ORDER, **options: Any) -> ValidatedPublish:
    return validate_publish(REGISTRY, topic_, payload, now=NOW, **options)


def _refused(code: ErrorCode, *args: Any, **options: Any) -> RunlaneError:
    with pytest.raises(RunlaneError) as raised:
        _publish(*args, **options)
    assert raised.value.code is code, raised.value
    return raised.value


def _with(*subscriptions: Any, topics: Any = (ORDERS,)) -> TopicRegistry:
    return register_topics(
        topics=topics,
        subscriptions=subscriptions,
        queues={"main": MAIN},
        default_queue=MAIN,
        task_ids=(),
        stores_messages=True,
    )


# --- what a valid publish plans (5.4.2) ---


def test_every_matching_subscription_gets_one_delivery_in_registration_order() -> None:
    planned = _publish(attributes={"event": "paid", "customer": "c-9"})

    assert [(d.subscription.name, d.mode, d.key) for d in planned.deliveries] == [
        ("orders.audit", SubscriptionMode.NONE, None),
        ("orders.email", SubscriptionMode.EXCLUSIVE, "c-9"),
        ("orders.ledger", SubscriptionMode.ORDERED, "c-1"),
    ]
    assert {d.queue for d in planned.deliveries} == {MAIN}


def test_a_subscription_whose_filter_does_not_match_gets_no_delivery() -> None:
    planned = _publish(attributes={"event": "created"})
    assert [d.subscription.name for d in planned.deliveries] == ["orders.audit", "orders.ledger"]


def test_no_matching_subscription_is_fine_the_message_is_still_planned() -> None:
    planned = _publish(LOGS, {"line": "hello"})
    assert planned.deliveries == ()
    assert planned.message.topic == "logs"


def test_the_message_carries_the_validated_payload_and_the_runtime_clock() -> None:
    planned = _publish(attributes={"event": "paid"})

    assert planned.message.payload == OrderEvent(order="o-1", customer="c-1")
    assert planned.payload_json == ORDER
    assert planned.payload_text == '{"order":"o-1","customer":"c-1"}'
    assert (planned.message.published_at, planned.message.sequence) == (NOW, None)
    assert planned.message.attributes == {"event": "paid"}


def test_a_message_id_is_made_when_none_is_given_and_kept_when_given() -> None:
    made, given = _publish(), _publish(message_id="m-1")
    assert made.message_id_given is False and len(made.message.id) == 36
    assert given.message_id_given is True and given.message.id == "m-1"


def test_the_publish_locks_each_keyed_subscription_and_key_once_in_sorted_order() -> None:
    planned = _publish(attributes={"event": "paid", "customer": "c-0"})
    assert planned.lock_keys == [("orders.email", "c-0"), ("orders.ledger", "c-1")]


def test_trace_carrier_and_deduplication_key_are_kept() -> None:
    planned = _publish(deduplication_key="order-1", trace_carrier={"traceparent": "00-a-b-01"})
    assert planned.deduplication_key == "order-1"
    assert planned.trace_carrier == {"traceparent": "00-a-b-01"}


# --- keys (5.2.2) ---


def test_an_absent_key_attribute_makes_the_delivery_keyless() -> None:
    planned = _publish(attributes={"event": "paid"})
    assert planned.deliveries[1].key is None


def test_a_key_function_returning_none_makes_the_delivery_keyless() -> None:
    keyless = subscription(
        "orders.x", topic=ORDERS, handler=handle, mode="ordered", key=lambda message: None
    )
    planned = validate_publish(_with(keyless), ORDERS, ORDER, now=NOW)
    assert planned.deliveries[0].key is None


def test_a_key_function_receives_the_message_with_its_validated_payload() -> None:
    seen: list[Message[Any]] = []

    def key(message: Message[Any]) -> str:
        seen.append(message)
        return "k"

    sub = subscription("orders.x", topic=ORDERS, handler=handle, mode="exclusive", key=key)
    validate_publish(_with(sub), ORDERS, ORDER, attributes={"a": "b"}, message_id="m", now=NOW)
    assert seen[0].payload == OrderEvent(order="o-1", customer="c-1")
    assert (seen[0].id, seen[0].attributes) == ("m", {"a": "b"})


@pytest.mark.parametrize("bad_key", ["", "x" * 257, 42, b"bytes", "nul\x00"])
def test_a_bad_key_refuses_the_whole_publish_naming_the_subscription(bad_key: Any) -> None:
    sub = subscription(
        "orders.x", topic=ORDERS, handler=handle, mode="ordered", key=lambda message: bad_key
    )
    with pytest.raises(RunlaneError) as raised:
        validate_publish(_with(AUDIT, sub), ORDERS, ORDER, now=NOW)
    assert raised.value.code is ErrorCode.PAYLOAD_INVALID
    assert raised.value.meta == {"subscription": "orders.x"}


def test_a_key_of_256_characters_is_allowed() -> None:
    planned = _publish(attributes={"event": "paid", "customer": "c" * 256})
    assert planned.deliveries[1].key == "c" * 256


def test_an_exception_from_a_key_function_propagates_unchanged() -> None:
    class Upstream(Exception):
        pass

    def key(message: Any) -> str:
        raise Upstream("lookup failed")

    sub = subscription("orders.x", topic=ORDERS, handler=handle, mode="exclusive", key=key)
    with pytest.raises(Upstream):
        validate_publish(_with(sub), ORDERS, ORDER, now=NOW)


# --- validation order: the first failure wins (5.4.1) ---


def test_1_an_unknown_topic_is_topic_not_found() -> None:
    _refused(ErrorCode.TOPIC_NOT_FOUND, "shipments", attributes={"runlane": "x"})
    _refused(ErrorCode.TOPIC_NOT_FOUND, topic("shipments"))


def test_1_a_topic_differing_from_the_registered_one_is_configuration_invalid() -> None:
    _refused(ErrorCode.CONFIGURATION_INVALID, topic("orders"), attributes={"runlane": "x"})


@pytest.mark.parametrize(
    "options",
    [
        {"message_id": ""},
        {"message_id": "a:b"},
        {"deduplication_key": "x" * 256},
        {"deduplication_key": 5},
        {"trace_carrier": {"traceparent": 1}},
        {"trace_carrier": {"baggage": "x" * 5000}},
    ],
)
def test_2_bad_ids_or_carrier_are_configuration_invalid_before_attributes(
    options: dict[str, Any],
) -> None:
    _refused(ErrorCode.CONFIGURATION_INVALID, attributes={"runlane": "x"}, **options)


def test_3_bad_attributes_are_payload_invalid_before_the_payload_is_checked() -> None:
    error = _refused(ErrorCode.PAYLOAD_INVALID, ORDERS, {"wrong": True}, attributes={"": "x"})
    assert error.meta == {"attribute": ""}


def test_4_a_payload_failing_the_schema_is_payload_invalid_and_names_the_topic() -> None:
    error = _refused(ErrorCode.PAYLOAD_INVALID, ORDERS, {"order": 1})
    assert "topic 'orders'" in error.message
    assert "task" not in error.message


def test_4_a_payload_that_is_not_strict_json_is_payload_invalid() -> None:
    _refused(ErrorCode.PAYLOAD_INVALID, LOGS, {"value": float("nan")})
    _refused(ErrorCode.PAYLOAD_INVALID, LOGS, {1: "int key"})


def test_4_a_payload_over_the_cap_is_payload_too_large() -> None:
    error = _refused(ErrorCode.PAYLOAD_TOO_LARGE, LOGS, "x" * 100, max_payload_bytes=64)
    assert "topic 'logs'" in error.message


def test_5_keys_are_checked_after_the_payload() -> None:
    bad = subscription(
        "orders.x", topic=ORDERS, handler=handle, mode="ordered", key=lambda message: 42
    )
    with pytest.raises(RunlaneError) as raised:
        validate_publish(_with(bad), ORDERS, {"order": 1}, now=NOW)
    assert raised.value.code is ErrorCode.PAYLOAD_INVALID
    assert "subscription" not in raised.value.meta
    assert "errors" in raised.value.meta


# --- deduplication window (5.4.3) ---


def test_a_key_is_a_duplicate_while_younger_than_the_window() -> None:
    published = NOW - timedelta(hours=23, minutes=59)
    assert is_within_window(published, ORDERS.deduplication_window, NOW)


def test_a_key_is_free_once_the_window_has_passed_measured_from_the_original() -> None:
    assert not is_within_window(NOW - timedelta(hours=24), ORDERS.deduplication_window, NOW)
    assert not is_within_window(NOW - timedelta(days=3), ORDERS.deduplication_window, NOW)


# --- message ids (5.4.4) ---


def _stored(payload: Any = ORDER, attributes: Any = None, topic_name: str = "orders") -> str:
    return canonical_envelope(topic_name, payload, attributes or {})


def test_c19_the_same_content_with_keys_in_another_order_is_a_duplicate() -> None:
    stored = _stored({"customer": "c-1", "order": "o-1"}, {"b": "2", "a": "1"}, "logs")
    again = validate_publish(
        REGISTRY,
        LOGS,
        {"order": "o-1", "customer": "c-1"},
        attributes={"a": "1", "b": "2"},
        message_id="m-1",
        now=NOW,
    )
    check_envelope_reuse("m-1", stored, envelope_of(again))  # a duplicate, not a conflict


def test_canonical_json_sorts_nested_keys_and_keeps_array_order() -> None:
    assert canonical_envelope("t", {"b": {"y": 1, "x": 2}, "a": [2, 1]}, {}) == (
        '{"attributes":{},"payload":{"a":[2,1],"b":{"x":2,"y":1}},"topic":"t"}'
    )
    assert canonical_envelope("t", [1, 2], {}) != canonical_envelope("t", [2, 1], {})


@pytest.mark.parametrize(
    "stored",
    [
        _stored(attributes={"event": "paid"}),
        _stored({"order": "o-2", "customer": "c-1"}),
        _stored(topic_name="logs"),
    ],
)
def test_c20_a_reused_message_id_with_other_content_is_message_id_conflict(stored: str) -> None:
    with pytest.raises(RunlaneError) as raised:
        check_envelope_reuse("m-1", stored, envelope_of(_publish(message_id="m-1")))
    assert raised.value.code is ErrorCode.MESSAGE_ID_CONFLICT
    assert raised.value.meta == {"message_id": "m-1"}
