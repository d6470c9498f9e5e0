"""Publishing to SNS topics on Ministack: fan-out by filter policy, FIFO groups, failures."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.config import Config
from pydantic import BaseModel

if TYPE_CHECKING:
    from tests.support.sns_world import SnsWorld

from runlane import ErrorCode, RunlaneError
from runlane.sns import TopicPublished, parse_sns_envelope, sns_topic, sns_transport
from runlane.topics.definitions import SubscriptionDef, subscription, topic

pytest_plugins = ["tests.support.ministack", "tests.support.sns_world"]

NOW = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


class Order(BaseModel):
    order_id: int


ORDERS = topic("orders", schema=Order)


def handle(message: Any, ctx: Any) -> None:
    return None


def sub(name: str, **options: Any) -> SubscriptionDef:
    return subscription(name, topic=options.pop("topic", ORDERS), handler=handle, **options)


def publish(transport: Any, payload: Any = None, *, topic_def: Any = ORDERS, **options: Any) -> Any:
    return asyncio.run(
        transport.publish_message(
            topic_def,
            {"order_id": 1} if payload is None else payload,
            environment="test",
            now=NOW,
            **options,
        )
    )


def test_sns_fans_a_message_out_to_the_subscriptions_whose_filters_match(
    sns_world: SnsWorld,
) -> None:
    arn = sns_world.topic()
    email = sub("orders.email", filter={"event": ["created", "paid"]})
    refunds = sub("orders.refunds", filter={"event": ["refunded"], "region": ["eu"]})
    audit = sub("orders.audit")
    bindings = [sns_world.subscribe(arn, definition) for definition in (email, refunds, audit)]
    transport = sns_transport(
        client=sns_world.sns, topics=[sns_topic(ORDERS, topic_arn=arn)], subscriptions=bindings
    )
    paid = publish(transport, attributes={"event": "paid"}, message_id="m-paid")
    refunded = publish(transport, attributes={"event": "refunded", "region": "eu"})
    publish(transport, attributes={"event": "Paid"}, message_id="m-case")  # case-sensitive
    publish(transport, attributes={"event": "refunded"}, message_id="m-no-region")
    assert isinstance(paid, TopicPublished)
    assert paid.message_id == "m-paid" and paid.topic == "orders" and paid.published_at == NOW
    assert paid.provider_message_id

    def received(binding: Any, expected: int) -> dict[str, dict[str, Any]]:
        messages = sns_world.receive_all(binding.queue_url, expected=expected, within=5)
        return {parse_sns_envelope(m["Body"]).message.id: m for m in messages}

    email_got = received(bindings[0], 1)
    assert set(email_got) == {"m-paid"}
    assert set(received(bindings[1], 1)) == {refunded.message_id}
    assert set(received(bindings[2], 4)) == {
        "m-paid",
        refunded.message_id,
        "m-case",
        "m-no-region",
    }
    envelope = parse_sns_envelope(email_got["m-paid"]["Body"])
    assert envelope.environment == "test"
    assert envelope.message.payload == {"order_id": 1}
    assert envelope.message.attributes == {"event": "paid"}
    assert envelope.message.published_at == NOW
    # Raw delivery: the attributes travel as SQS message attributes too.
    sqs_attributes = email_got["m-paid"]["MessageAttributes"]
    assert sqs_attributes == {"event": {"StringValue": "paid", "DataType": "String"}}
    assert sns_world.receive(bindings[0].queue_url, wait=1) == []


def test_a_fifo_topic_groups_by_the_message_group_attribute_and_drops_repeated_ids(
    sns_world: SnsWorld,
) -> None:
    arn = sns_world.topic(fifo=True)
    ship = sub("orders.ship", mode="exclusive", key="customer")
    binding = sns_world.subscribe(arn, ship)
    transport = sns_transport(
        client=sns_world.sns,
        topics=[sns_topic(ORDERS, topic_arn=arn, message_group="customer")],
        subscriptions=[binding],
    )
    for index in range(3):
        publish(
            transport, {"order_id": index}, attributes={"customer": "c1"}, message_id=f"a{index}"
        )
    publish(transport, attributes={"customer": "c 2"}, message_id="b0")  # SNS refuses the space
    publish(transport, attributes={}, message_id="lonely")  # no group attribute: its own group
    publish(transport, {"order_id": 99}, attributes={"customer": "c1"}, message_id="a0")  # repeat
    messages = sns_world.receive_all(binding.queue_url, expected=5, within=5)
    ids = [parse_sns_envelope(m["Body"]).message.id for m in messages]
    assert sorted(ids) == ["a0", "a1", "a2", "b0", "lonely"]
    assert [i for i in ids if i.startswith("a")] == ["a0", "a1", "a2"]
    groups = {
        parse_sns_envelope(m["Body"]).message.id: m["Attributes"]["MessageGroupId"]
        for m in messages
    }
    assert groups["a0"] == groups["a2"] == "c1"
    assert groups["b0"] == hashlib.sha256(b"c 2").hexdigest()
    assert groups["lonely"] == "lonely"
    first = next(m for m in messages if parse_sns_envelope(m["Body"]).message.id == "a0")
    assert parse_sns_envelope(first["Body"]).message.payload == {"order_id": 0}


def test_publish_checks_come_in_the_contracts_order_and_send_nothing(sns_world: SnsWorld) -> None:
    arn = sns_world.topic()
    audit = sub("orders.audit")
    binding = sns_world.subscribe(arn, audit)
    transport = sns_transport(
        client=sns_world.sns, topics=[sns_topic(ORDERS, topic_arn=arn)], subscriptions=[binding]
    )
    cases: list[tuple[dict[str, Any], ErrorCode]] = [
        ({"topic_def": "payments"}, ErrorCode.TOPIC_NOT_FOUND),
        ({"topic_def": topic("orders")}, ErrorCode.CONFIGURATION_INVALID),
        (
            {"deduplication_key": "k", "attributes": {"bad name": "x"}},
            ErrorCode.CAPABILITY_UNSUPPORTED,
        ),
        ({"connection": object()}, ErrorCode.CAPABILITY_UNSUPPORTED),
        ({"message_id": "a:b"}, ErrorCode.CONFIGURATION_INVALID),
        ({"attributes": {"runlane_x": "1"}, "payload": {"wrong": 1}}, ErrorCode.PAYLOAD_INVALID),
        ({"payload": {"order_id": "not a number"}}, ErrorCode.PAYLOAD_INVALID),
        (
            {"attributes": {"big": "x" * 256}, "trace_carrier": {"k": "v" * 5000}},
            ErrorCode.CONFIGURATION_INVALID,
        ),
    ]
    for options, code in cases:
        with pytest.raises(RunlaneError) as raised:
            publish(transport, **options)
        assert raised.value.code is code, options
    assert sns_world.receive(binding.queue_url, wait=1) == []


def test_an_envelope_over_262144_bytes_is_payload_too_large(sns_world: SnsWorld) -> None:
    arn = sns_world.topic()
    binding = sns_world.subscribe(arn, sub("orders.audit", topic=topic("blobs")))
    blobs = binding.subscription.topic
    transport = sns_transport(
        client=sns_world.sns, topics=[sns_topic(blobs, topic_arn=arn)], subscriptions=[binding]
    )
    # The payload alone fits the 256 KiB payload limit; with its envelope it does not.
    with pytest.raises(RunlaneError) as raised:
        publish(transport, "x" * (262_144 - 20), topic_def=blobs, attributes={"a": "b"})
    assert raised.value.code is ErrorCode.PAYLOAD_TOO_LARGE
    assert raised.value.meta["limit"] == 262_144 and raised.value.meta["size"] > 262_144
    assert sns_world.receive(binding.queue_url, wait=1) == []


SECRET = "runlane-test-secret-key-do-not-leak"


def leaked(error: RunlaneError) -> bool:
    return (
        SECRET in str(error)
        or SECRET in repr(error)
        or SECRET in json.dumps(error.meta, default=str)
    )


def test_an_sns_outage_during_publish_is_transport_unavailable_and_retryable() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = boto3.client(
        "sns",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="AKIATESTTESTTEST",
        aws_secret_access_key=SECRET,
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    transport = sns_transport(
        client=client,
        topics=[sns_topic(ORDERS, topic_arn="arn:aws:sns:us-east-1:000000000000:orders")],
    )
    with pytest.raises(RunlaneError) as raised:
        publish(transport, message_id="retry-me")
    error = raised.value
    assert error.code is ErrorCode.TRANSPORT_UNAVAILABLE and error.retryable is True
    assert error.message.startswith("SNS Publish failed")
    assert error.meta["message_id"] == "retry-me" and error.meta["operation"] == "Publish"
    assert not leaked(error)


def test_a_refused_publish_is_transport_publish_failed_with_provider_text_in_meta_only(
    sns_client: Any,
) -> None:
    missing = "arn:aws:sns:us-east-1:000000000000:runlane-missing-topic"
    transport = sns_transport(client=sns_client, topics=[sns_topic(ORDERS, topic_arn=missing)])
    with pytest.raises(RunlaneError) as raised:
        publish(transport)
    error = raised.value
    assert error.code is ErrorCode.TRANSPORT_PUBLISH_FAILED and error.retryable is False
    assert error.meta["provider_code"] == "NotFound"
    assert "does not exist" in error.meta["provider_message"]
    assert "does not exist" not in error.message
    assert error.meta["topic_arn"] == missing
