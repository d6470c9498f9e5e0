"""The topic transport conformance suite: every broker of brokered topics must pass all of it.

Use it from a test module of your own::

    from runlane.testing.conformance.topic_transport import *  # noqa: F403

and provide two fixtures:

- ``topic_transport_factory``: ``(topics: Sequence[TopicDef], subscriptions:
  Sequence[SubscriptionDef]) -> TopicTransport``, a new transport carrying exactly
  those topics, with one fresh provider destination per subscription that the
  broker feeds through the subscription's filter;
- ``delivered_bodies``: ``async (subscription: SubscriptionDef) -> list[str]``, the
  bodies the broker delivered to that subscription since the last call, in
  delivery order (reading acknowledges them).

The tests are async and expect pytest-asyncio in ``auto`` mode.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from runlane.ports.message_envelope import parse_sns_envelope
from runlane.ports.topic_transport import TopicPublished, TopicTransport
from runlane.topics.definitions import SubscriptionDef, TopicDef, subscription, topic
from runlane.types.errors import ErrorCode, RunlaneError

TopicTransportFactory = Callable[[Sequence[TopicDef], Sequence[SubscriptionDef]], TopicTransport]
DeliveredBodies = Callable[[SubscriptionDef], Awaitable[list[str]]]

ENVIRONMENT = "conformance"
PUBLISHED_AT = datetime(2026, 3, 1, 12, 30, 15, 250_000, tzinfo=UTC)
_ids = itertools.count(1)


def _ignore(message: Any, ctx: Any) -> None:
    return None


ORDERS = topic("orders")
EVERYTHING = subscription("orders.everything", topic=ORDERS, handler=_ignore)
PAID_EU = subscription(
    "orders.paid-eu",
    topic=ORDERS,
    handler=_ignore,
    filter={"event": ["paid", "refunded"], "region": ["eu"]},
)
CREATED = subscription(
    "orders.created", topic=ORDERS, handler=_ignore, filter={"event": ["created"]}
)
SUBSCRIPTIONS = (EVERYTHING, PAID_EU, CREATED)


async def _publish(transport: TopicTransport, **options: Any) -> TopicPublished:
    options.setdefault("message_id", f"conformance-{next(_ids)}")
    return await transport.publish_message(
        options.pop("topic", ORDERS),
        options.pop("payload", {"n": 1}),
        environment=ENVIRONMENT,
        now=PUBLISHED_AT,
        **options,
    )


def _ids_of(bodies: Sequence[str]) -> list[str]:
    return [parse_sns_envelope(body).message.id for body in bodies]


async def test_the_transport_implements_the_protocol_and_names_what_it_carries(
    topic_transport_factory: TopicTransportFactory,
) -> None:
    transport = topic_transport_factory([ORDERS], SUBSCRIPTIONS)
    assert isinstance(transport, TopicTransport)
    assert isinstance(transport.name, str) and transport.name
    assert transport.carries(ORDERS) and transport.carries("orders")
    assert not transport.carries("payments")
    await transport.open()
    await transport.close()


async def test_a_published_message_round_trips_every_field(
    topic_transport_factory: TopicTransportFactory, delivered_bodies: DeliveredBodies
) -> None:
    transport = topic_transport_factory([ORDERS], SUBSCRIPTIONS)
    published = await _publish(
        transport,
        payload={"order": {"id": 7, "lines": [1, 2]}, "note": "é"},
        attributes={"event": "paid", "region": "eu"},
        message_id="round-trip",
        trace_carrier={"traceparent": "00-abc-def-01"},
    )
    assert isinstance(published, TopicPublished)
    assert (published.message_id, published.topic) == ("round-trip", "orders")
    assert published.published_at == PUBLISHED_AT
    (body,) = await delivered_bodies(EVERYTHING)
    envelope = parse_sns_envelope(body)
    assert envelope.environment == ENVIRONMENT
    assert envelope.trace_carrier == {"traceparent": "00-abc-def-01"}
    message = envelope.message
    assert (message.id, message.topic, message.sequence) == ("round-trip", "orders", None)
    assert message.payload == {"order": {"id": 7, "lines": [1, 2]}, "note": "é"}
    assert message.attributes == {"event": "paid", "region": "eu"}
    assert message.published_at == PUBLISHED_AT


async def test_fan_out_follows_the_filters_exactly(
    topic_transport_factory: TopicTransportFactory, delivered_bodies: DeliveredBodies
) -> None:
    transport = topic_transport_factory([ORDERS], SUBSCRIPTIONS)
    cases = {
        "paid-eu": {"event": "paid", "region": "eu"},
        "refunded-eu": {"event": "refunded", "region": "eu", "extra": "ignored"},
        "paid-us": {"event": "paid", "region": "us"},
        "paid-no-region": {"event": "paid"},
        "Paid-eu": {"event": "Paid", "region": "eu"},
        "created": {"event": "created"},
        "bare": {},
    }
    for message_id, attributes in cases.items():
        await _publish(transport, message_id=message_id, attributes=attributes)
    assert sorted(_ids_of(await delivered_bodies(EVERYTHING))) == sorted(cases)
    assert sorted(_ids_of(await delivered_bodies(PAID_EU))) == ["paid-eu", "refunded-eu"]
    assert _ids_of(await delivered_bodies(CREATED)) == ["created"]
    for sub in SUBSCRIPTIONS:
        assert sorted(_ids_of(await delivered_bodies(sub))) == [], sub.name


async def test_a_generated_message_id_is_new_each_time(
    topic_transport_factory: TopicTransportFactory, delivered_bodies: DeliveredBodies
) -> None:
    transport = topic_transport_factory([ORDERS], SUBSCRIPTIONS)
    first = await _publish(transport, message_id=None)
    second = await _publish(transport, message_id=None)
    assert first.message_id != second.message_id
    assert sorted(_ids_of(await delivered_bodies(EVERYTHING))) == sorted(
        [first.message_id, second.message_id]
    )


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"topic": "payments"}, ErrorCode.TOPIC_NOT_FOUND),
        ({"topic": topic("orders", deduplication_window="1h")}, ErrorCode.CONFIGURATION_INVALID),
        ({"deduplication_key": "k"}, ErrorCode.CAPABILITY_UNSUPPORTED),
        ({"connection": object()}, ErrorCode.CAPABILITY_UNSUPPORTED),
        ({"attributes": {"runlane_reserved": "x"}}, ErrorCode.PAYLOAD_INVALID),
        ({"attributes": {f"a{i}": "x" for i in range(11)}}, ErrorCode.PAYLOAD_INVALID),
        ({"payload": float("nan")}, ErrorCode.PAYLOAD_INVALID),
        ({"payload": "x" * 262_144}, ErrorCode.PAYLOAD_TOO_LARGE),
        ({"message_id": "a:b"}, ErrorCode.CONFIGURATION_INVALID),
    ],
)
async def test_a_refused_publish_delivers_nothing(
    topic_transport_factory: TopicTransportFactory,
    delivered_bodies: DeliveredBodies,
    options: dict[str, Any],
    code: ErrorCode,
) -> None:
    transport = topic_transport_factory([ORDERS], SUBSCRIPTIONS)
    with pytest.raises(RunlaneError) as raised:
        await _publish(transport, **options)
    assert raised.value.code is code
    assert await delivered_bodies(EVERYTHING) == []


__all__ = [name for name in dir() if name.startswith("test_")]
