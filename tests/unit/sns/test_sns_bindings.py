"""SNS bindings, the filter-policy mapping and the configuration rules of 5.11.1 and 5.11.2."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from runlane import ErrorCode, RetryPolicy, RunlaneError, queue
from runlane.sns import (
    check_sns_registration,
    sns_filter_policy,
    sns_subscription,
    sns_topic,
    sns_transport,
)
from runlane.topics.definitions import SubscriptionDef, subscription, topic

ARN = "arn:aws:sns:us-east-1:123456789012:orders"
FIFO_ARN = "arn:aws:sns:us-east-1:123456789012:orders.fifo"
BASE = "https://sqs.us-east-1.amazonaws.com/123456789012/"

ORDERS = topic("orders")


def handle(message: Any, ctx: Any) -> None:
    return None


def sub(name: str = "orders.email", **options: Any) -> SubscriptionDef:
    return subscription(name, topic=options.pop("topic", ORDERS), handler=handle, **options)


def bound(definition: SubscriptionDef, *, fifo: bool = False) -> Any:
    suffix = ".fifo" if fifo else ""
    name = definition.name.replace(".", "-")
    return sns_subscription(
        definition,
        queue_url=f"{BASE}{name}{suffix}",
        dead_letter_queue_url=f"{BASE}{name}-dlq{suffix}",
    )


def clients() -> tuple[Any, Any]:
    # Real boto3 clients; building a transport makes no call, so no endpoint is needed.
    options = {"region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "y"}
    return boto3.client("sns", **options), boto3.client("sqs", **options)


def refused(call: Any, code: ErrorCode = ErrorCode.CONFIGURATION_INVALID) -> str:
    with pytest.raises(RunlaneError) as raised:
        call()
    assert raised.value.code is code
    return raised.value.message


def test_a_topic_arn_ending_in_fifo_is_a_fifo_topic() -> None:
    assert sns_topic(ORDERS, topic_arn=ARN).fifo is False
    fifo = sns_topic(ORDERS, topic_arn=FIFO_ARN, message_group="customer")
    assert fifo.fifo is True and fifo.message_group == "customer"


@pytest.mark.parametrize(
    "arn",
    [
        "",
        "orders",
        "arn:aws:sqs:us-east-1:123456789012:orders",
        "arn:aws:sns:us-east-1:1234:orders",
        "arn:aws:sns:us-east-1:123456789012:",
        "arn:aws:sns:us-east-1:123456789012:or ders",
        None,
    ],
)
def test_a_malformed_topic_arn_is_refused(arn: Any) -> None:
    refused(lambda: sns_topic(ORDERS, topic_arn=arn))


def test_message_group_is_refused_on_a_standard_topic_and_must_name_an_attribute() -> None:
    assert "FIFO" in refused(lambda: sns_topic(ORDERS, topic_arn=ARN, message_group="customer"))
    refused(lambda: sns_topic(ORDERS, topic_arn=FIFO_ARN, message_group="runlane_x"))
    refused(lambda: sns_topic("orders", topic_arn=ARN))  # type: ignore[arg-type]


def test_subscription_queues_must_agree_on_fifo_and_differ() -> None:
    definition = sub()
    refused(
        lambda: sns_subscription(
            definition, queue_url=f"{BASE}a.fifo", dead_letter_queue_url=f"{BASE}a-dlq"
        )
    )
    refused(
        lambda: sns_subscription(definition, queue_url=f"{BASE}a", dead_letter_queue_url=f"{BASE}a")
    )
    refused(
        lambda: sns_subscription(
            definition, queue_url="not a url", dead_letter_queue_url=f"{BASE}b"
        )
    )
    assert bound(definition, fifo=True).fifo is True
    assert bound(definition).queue_name == "orders-email"


def test_ordered_a_queue_and_a_long_backoff_are_refused_by_the_binding() -> None:
    ordered = sub(mode="ordered", key="customer")
    assert "ordered" in refused(lambda: bound(ordered))
    on_queue = sub(queue=queue("emails"))
    assert "queue=" in refused(lambda: bound(on_queue))
    slow = sub(retry=RetryPolicy(max_attempts=3, initial_delay="1h", max_delay="13h"))
    assert "12h" in refused(lambda: bound(slow))
    assert bound(sub(retry=RetryPolicy(max_attempts=3, max_delay="12h"))).subscription.name


def test_the_filter_policy_sorts_attributes_and_keeps_value_order() -> None:
    definition = sub(filter={"region": ["eu", "us"], "event": ["paid", "created"]})
    policy = sns_filter_policy(definition)
    assert policy == {"event": ["paid", "created"], "region": ["eu", "us"]}
    assert list(policy or {}) == ["event", "region"]
    assert sns_filter_policy(bound(definition)) == policy
    assert sns_filter_policy(sub()) is None
    assert sns_filter_policy(sub(filter={})) is None
    refused(lambda: sns_filter_policy("orders.email"))  # type: ignore[arg-type]


def test_the_transport_checks_its_bindings_among_themselves() -> None:
    sns, sqs = clients()
    standard = sns_topic(ORDERS, topic_arn=ARN)
    fifo = sns_topic(ORDERS, topic_arn=FIFO_ARN, message_group="customer")
    plain = sub()
    exclusive = sub("orders.ship", mode="exclusive", key="customer")
    other_key = sub("orders.bill", mode="exclusive", key="account")
    transport = sns_transport(
        client=sns, sqs_client=sqs, topics=[standard], subscriptions=[bound(plain)]
    )
    assert transport.carries(ORDERS) and transport.carries("orders") and not transport.carries("x")
    # A FIFO topic needs FIFO queues and the other way round.
    refused(lambda: sns_transport(client=sns, topics=[fifo], subscriptions=[bound(plain)]))
    refused(
        lambda: sns_transport(
            client=sns, topics=[standard], subscriptions=[bound(plain, fifo=True)]
        )
    )
    # EXCLUSIVE: only on a FIFO topic, keyed by its message_group attribute.
    assert "FIFO" in refused(
        lambda: sns_transport(client=sns, topics=[standard], subscriptions=[bound(exclusive)])
    )
    assert sns_transport(client=sns, topics=[fifo], subscriptions=[bound(exclusive, fifo=True)])
    assert "message_group" in refused(
        lambda: sns_transport(
            client=sns, topics=[fifo], subscriptions=[bound(other_key, fifo=True)]
        )
    )
    # A subscription whose topic is not bound; twice the same topic, subscription or queue.
    other_topic = sub("news.read", topic=topic("news"))
    refused(
        lambda: sns_transport(client=sns, topics=[standard], subscriptions=[bound(other_topic)])
    )
    refused(lambda: sns_transport(client=sns, topics=[standard, standard]))
    refused(lambda: sns_transport(client=sns, topics=[standard], subscriptions=[bound(plain)] * 2))
    refused(lambda: sns_transport(client=sns, topics=[]))
    refused(lambda: sns_transport(client=sqs, topics=[standard]))
    refused(lambda: sns_transport(client=sns, sqs_client=sns, topics=[standard]))
    refused(lambda: sns_transport(client=sns, topics=standard))  # type: ignore[arg-type]


def test_registration_refuses_unregistered_bindings_and_unbound_subscriptions() -> None:
    sns, sqs = clients()
    plain = sub()
    second = sub("orders.audit")
    transport = sns_transport(
        client=sns,
        sqs_client=sqs,
        topics=[sns_topic(ORDERS, topic_arn=ARN)],
        subscriptions=[bound(plain)],
    )
    assert check_sns_registration(transport, topics=[ORDERS], subscriptions=[plain]) == {"orders"}
    assert check_sns_registration(None, topics=[ORDERS], subscriptions=[plain]) == frozenset()
    refused(lambda: check_sns_registration(transport, topics=[], subscriptions=[plain]))
    refused(lambda: check_sns_registration(transport, topics=[ORDERS], subscriptions=[]))
    assert "no sns_subscription" in refused(
        lambda: check_sns_registration(transport, topics=[ORDERS], subscriptions=[plain, second])
    )
    drifted = topic("orders", deduplication_window="1h")
    refused(lambda: check_sns_registration(transport, topics=[drifted], subscriptions=[plain]))
    refused(
        lambda: check_sns_registration(transport, topics=[ORDERS, ORDERS], subscriptions=[plain])
    )
    refused(
        lambda: check_sns_registration(transport, topics=[ORDERS], subscriptions=[plain, plain])
    )
    assert "task id" in refused(
        lambda: check_sns_registration(
            transport, topics=[ORDERS], subscriptions=[plain], task_ids={"orders.email"}
        )
    )
    ordered = sub("orders.log", mode="ordered", key="customer")
    assert "ordered" in refused(
        lambda: check_sns_registration(transport, topics=[ORDERS], subscriptions=[plain, ordered])
    )


def test_publish_options_sns_cannot_honour_are_capability_errors() -> None:
    sns, _ = clients()
    transport = sns_transport(client=sns, topics=[sns_topic(ORDERS, topic_arn=ARN)])
    transport.check_publish_options(ORDERS)
    for options in ({"deduplication_key": "k"}, {"connection": object()}):
        refused(
            lambda options=options: transport.check_publish_options(ORDERS, **options),
            ErrorCode.CAPABILITY_UNSUPPORTED,
        )


async def test_dead_letters_need_an_sqs_client_and_a_bound_subscription() -> None:
    sns, _ = clients()
    plain = sub()
    transport = sns_transport(
        client=sns, topics=[sns_topic(ORDERS, topic_arn=ARN)], subscriptions=[bound(plain)]
    )
    with pytest.raises(RunlaneError) as raised:
        await transport.list_dead_letters(plain)
    assert raised.value.code is ErrorCode.CAPABILITY_UNSUPPORTED
    with pytest.raises(RunlaneError) as raised:
        await transport.list_dead_letters("orders.unknown")
    assert raised.value.code is ErrorCode.SUBSCRIPTION_NOT_FOUND
