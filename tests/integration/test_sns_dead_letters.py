"""Dead letters of SNS subscriptions on Ministack: best-effort scans, replay and discard."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from runlane import ErrorCode, RetryPolicy, RunlaneError
from runlane.sns import (
    SnsDeadLetter,
    SnsSubscriptionBinding,
    SnsTransport,
    create_sns_lambda_handler,
    create_sns_message_body,
    sns_topic,
    sns_transport,
)
from runlane.topics.definitions import SubscriptionDef, subscription, topic
from runlane.topics.messages import DeliveryContext, Message
from runlane.topics.outcomes import FatalWorkError, Outcome

if TYPE_CHECKING:
    from tests.support.sns_world import SnsWorld

pytest_plugins = ["tests.support.ministack", "tests.support.sns_world"]

NOW = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
EVENTS = topic("events")
seen: list[tuple[str, bool, int]] = []


def work(message: Message[Any], ctx: DeliveryContext) -> Any:
    seen.append((message.id, ctx.is_replay, ctx.attempt))
    if message.payload == "dead":
        return Outcome.dead_letter("refused")
    if message.payload == "fatal":
        raise FatalWorkError("broken")
    return None


def events_subscription(**options: Any) -> SubscriptionDef:
    options.setdefault("retry", RetryPolicy(max_attempts=2))
    return subscription("events.work", topic=EVENTS, handler=work, **options)


class Setup:
    """A topic with one subscription, its transport and its Lambda handler."""

    def __init__(self, world: SnsWorld, *, fifo: bool = False, **options: Any) -> None:
        self.world = world
        self.arn = world.topic(fifo=fifo)
        self.binding: SnsSubscriptionBinding = world.subscribe(
            self.arn, events_subscription(**options)
        )
        group = "customer" if fifo else None
        self.transport: SnsTransport = sns_transport(
            client=world.sns,
            sqs_client=world.sqs,
            topics=[sns_topic(EVENTS, topic_arn=self.arn, message_group=group)],
            subscriptions=[self.binding],
        )
        self.handler = create_sns_lambda_handler(subscription=self.binding, client=world.sqs)

    def publish(self, message_id: str, payload: Any, **attributes: str) -> None:
        asyncio.run(
            self.transport.publish_message(
                EVENTS,
                payload,
                environment="test",
                now=NOW,
                message_id=message_id,
                attributes=attributes,
            )
        )

    def consume(self, expected: int) -> list[str]:
        """One invocation over ``expected`` messages; Lambda deletes what was acknowledged."""
        messages = self.world.receive_all(self.binding.queue_url, expected=expected)
        assert len(messages) == expected
        response = self.handler(self.world.event(self.binding.queue_url, messages), None)
        failed = [item["itemIdentifier"] for item in response["batchItemFailures"]]
        self.world.delete(
            self.binding.queue_url, [m for m in messages if m["MessageId"] not in failed]
        )
        return failed

    def run(self, coroutine: Any) -> Any:
        return asyncio.run(coroutine)

    def dlq_visible(self) -> int:
        """How many DLQ messages a receive sees right now (then made visible again)."""
        messages = self.world.receive(self.binding.dead_letter_queue_url, wait=1, visibility=0)
        return len(messages)


def test_a_scan_lists_every_kind_of_dead_letter_and_leaves_them_visible(
    sns_world: SnsWorld,
) -> None:
    s = Setup(sns_world)
    s.publish("m-dead", "dead")
    s.publish("m-fatal", "fatal")
    s.publish("m-ok", "ok")
    assert s.consume(3) == []
    dlq = s.binding.dead_letter_queue_url
    sns_world.sqs.send_message(QueueUrl=dlq, MessageBody="garbage")  # moved by a redrive
    stray = Message(
        id="m-redriven", topic="events", payload=1, attributes={}, published_at=NOW, sequence=None
    )
    sns_world.sqs.send_message(
        QueueUrl=dlq, MessageBody=create_sns_message_body(stray, environment="test")
    )
    listed: list[SnsDeadLetter] = s.run(s.transport.list_dead_letters("events.work"))
    by_id = {d.id: d for d in listed}
    assert len(listed) == 4
    assert [d.dead_lettered_at for d in listed] == sorted(d.dead_lettered_at for d in listed)
    dead = by_id["m-dead"]
    assert (dead.reason, dead.failure, dead.attempt, dead.replays) == ("refused", None, 1, 0)
    assert dead.subscription == "events.work" and dead.topic == "events" and dead.key is None
    assert dead.blocks_key is False and dead.replayable is True
    assert dead.message.payload == "dead" and dead.message.published_at == NOW
    fatal = by_id["m-fatal"]
    assert fatal.reason == "broken" and fatal.failure is not None
    assert fatal.failure.meta["exception_type"] == "FatalWorkError"
    redriven = by_id["m-redriven"]
    assert (redriven.reason, redriven.attempt) == ("redrive_policy", 0)
    (garbage,) = [d for d in listed if d.id.startswith("sqs-")]
    assert garbage.replayable is False and garbage.message.payload == "garbage"
    assert garbage.id == "sqs-" + garbage.provider_message_id
    assert set(dead.fields()) == {
        "id",
        "subscription",
        "topic",
        "key",
        "reason",
        "failure",
        "attempt",
        "replays",
        "dead_lettered_at",
        "blocks_key",
        "message",
    }
    assert s.dlq_visible() == 4  # visibility restored after the peek
    assert len(s.run(s.transport.list_dead_letters("events.work", limit=2))) == 2
    with pytest.raises(RunlaneError) as raised:
        s.run(s.transport.list_dead_letters("events.work", limit=0))
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_replay_sends_the_message_back_and_the_handler_sees_a_replay(sns_world: SnsWorld) -> None:
    s = Setup(sns_world)
    s.publish("m-dead", "dead")
    s.publish("m-other", "fatal")
    s.consume(2)
    seen.clear()
    found = s.run(s.transport.get_dead_letter("m-dead", subscription="events.work"))
    assert found.reason == "refused"
    assert (
        s.run(
            s.transport.replay_dead_letter(
                "m-dead", subscription="events.work", reason="fixed upstream", actor="ops"
            )
        )
        is None
    )
    (replayed,) = sns_world.receive_all(s.binding.queue_url, expected=1)
    assert replayed["Attributes"]["ApproximateReceiveCount"] == "1"  # a new message: fresh budget
    attributes = {k: v["StringValue"] for k, v in replayed["MessageAttributes"].items()}
    assert attributes == {
        "runlane_replay": "1",
        "runlane_replays": "1",
        "runlane_replay_reason": "fixed upstream",
        "runlane_replay_actor": "ops",
    }
    sns_world.sqs.change_message_visibility(
        QueueUrl=s.binding.queue_url, ReceiptHandle=replayed["ReceiptHandle"], VisibilityTimeout=0
    )
    assert s.consume(1) == []  # dead-lettered again by the handler
    assert seen == [("m-dead", True, 2)]  # the peek above counted one receive
    listed = {d.id: d for d in s.run(s.transport.list_dead_letters("events.work"))}
    assert set(listed) == {"m-dead", "m-other"}
    assert listed["m-dead"].replays == 1  # carried from the replayed message into its copy


def test_discard_deletes_the_copy_and_bad_calls_change_nothing(sns_world: SnsWorld) -> None:
    s = Setup(sns_world)
    s.publish("m-dead", "dead")
    s.consume(1)
    dlq = s.binding.dead_letter_queue_url
    sns_world.sqs.send_message(QueueUrl=dlq, MessageBody="garbage")
    transport = s.transport
    cases: list[tuple[Any, ErrorCode]] = [
        (
            transport.discard_dead_letter("m-dead", subscription="events.work", reason=""),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            transport.discard_dead_letter("m-dead", subscription="events.work", reason="x" * 1001),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            transport.discard_dead_letter(
                "m-dead", subscription="events.work", reason="r", actor="a:b"
            ),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            transport.replay_dead_letter("m-dead", subscription="events.work", reason="\x00"),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            transport.discard_dead_letter("nope", subscription="events.work", reason="r"),
            ErrorCode.DEAD_LETTER_NOT_FOUND,
        ),
        (
            transport.get_dead_letter("nope", subscription="events.work"),
            ErrorCode.DEAD_LETTER_NOT_FOUND,
        ),
        (
            transport.discard_dead_letter("m-dead", subscription="events.other", reason="r"),
            ErrorCode.SUBSCRIPTION_NOT_FOUND,
        ),
    ]
    for call, code in cases:
        with pytest.raises(RunlaneError) as raised:
            s.run(call)
        assert raised.value.code is code
    (garbage,) = [d for d in s.run(transport.list_dead_letters("events.work")) if not d.replayable]
    with pytest.raises(RunlaneError) as raised:
        s.run(transport.replay_dead_letter(garbage.id, subscription="events.work"))
    assert raised.value.code is ErrorCode.INVALID_STATE
    assert raised.value.meta["status"] == "invalid_envelope"
    assert s.dlq_visible() == 2  # nothing changed, everything visible again
    s.run(transport.discard_dead_letter(garbage.id, subscription="events.work", reason="junk"))
    s.run(transport.discard_dead_letter("m-dead", subscription="events.work", reason="obsolete"))
    assert s.run(transport.list_dead_letters("events.work")) == []
    assert sns_world.receive(s.binding.queue_url, wait=0) == []


def test_fifo_dead_letters_have_keys_and_replay_into_their_group(sns_world: SnsWorld) -> None:
    s = Setup(sns_world, fifo=True, mode="exclusive", key="customer")
    s.publish("a-dead", "dead", customer="a")
    s.publish("b-dead", "dead", customer="b")
    s.consume(2)
    only_a = s.run(s.transport.list_dead_letters("events.work", key="a"))
    assert [d.id for d in only_a] == ["a-dead"] and only_a[0].key == "a"
    s.run(s.transport.replay_dead_letter("a-dead", subscription="events.work"))
    (replayed,) = sns_world.receive_all(s.binding.queue_url, expected=1)
    assert replayed["Attributes"]["MessageGroupId"] == "a"
    assert "runlane_replay_reason" not in replayed["MessageAttributes"]
    assert [d.id for d in s.run(s.transport.list_dead_letters("events.work"))] == ["b-dead"]


def test_the_queue_redrive_policy_moves_messages_the_consumer_never_settled(
    sns_world: SnsWorld,
) -> None:
    arn = sns_world.topic()
    binding = sns_world.subscribe(arn, events_subscription(), max_receive_count=1)
    transport = sns_transport(
        client=sns_world.sns,
        sqs_client=sns_world.sqs,
        topics=[sns_topic(EVENTS, topic_arn=arn)],
        subscriptions=[binding],
    )
    asyncio.run(
        transport.publish_message(EVENTS, "x", environment="test", now=NOW, message_id="crash")
    )
    # A consumer that crashed at once, every time: the receives count, nothing settles.
    deadline = time.monotonic() + 10
    listed: list[SnsDeadLetter] = []
    while not listed and time.monotonic() < deadline:
        sns_world.receive(binding.queue_url, wait=1, visibility=0)
        listed = asyncio.run(transport.list_dead_letters("events.work"))
    assert [(d.id, d.reason, d.attempt) for d in listed] == [("crash", "redrive_policy", 0)]


def test_counts_are_read_from_the_queue_attributes(sns_world: SnsWorld) -> None:
    s = Setup(sns_world)
    s.publish("m-dead", "dead")
    assert s.consume(1) == []
    s.publish("m-wait", "ok")
    s.publish("m-busy", "ok")
    sns_world.receive(s.binding.queue_url, count=1, wait=1, visibility=60)  # one in flight
    counts = s.run(s.transport.subscription_counts("events.work"))
    assert (counts.waiting, counts.running, counts.dead_lettered) == (1, 1, 1)
