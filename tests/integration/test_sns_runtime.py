"""SNS topics through the runtime on Ministack: ``rl.publish``, ``rl.dead_letters`` and
``rl.subscriptions`` reach the broker, beside stored topics on the same runtime (5.11)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from runlane import (
    ErrorCode,
    Lane,
    Outcome,
    RetryPolicy,
    Runlane,
    RunlaneError,
    RunStatus,
    postgres_sqs_lane,
    queue,
    sqlite_lane,
    subscription,
    topic,
)
from runlane.sns import (
    SnsSubscriptionBinding,
    SnsTransport,
    create_sns_lambda_handler,
    parse_sns_envelope,
    sns_topic,
    sns_transport,
)
from runlane.sqs import sqs_queue, sqs_transport
from runlane.topics.definitions import SubscriptionDef, TopicDef
from runlane.topics.messages import DeliveryContext, Message
from runlane.topics.records import DeadLetter, PublishReceipt, SubscriptionStats

if TYPE_CHECKING:
    from tests.support.sns_world import SnsWorld

pytest_plugins = ["tests.support.ministack", "tests.support.sns_world"]

MAIN = queue("main", default=True)
ORDERS = topic("orders")
INVOICES = topic("invoices")
handled: list[tuple[str, str, bool, int]] = []


def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
    handled.append((ctx.subscription, message.id, ctx.is_replay, ctx.attempt))
    if message.payload == "dead":
        return Outcome.dead_letter("refused by the handler")
    return None


def sub(name: str, topic_def: TopicDef = ORDERS, **options: Any) -> SubscriptionDef:
    options.setdefault("retry", RetryPolicy(max_attempts=2))
    return subscription(name, topic=topic_def, handler=handle, **options)


EMAIL = sub("orders.email", filter={"event": ["paid"]})
AUDIT = sub("orders.audit")
BILLING = sub("invoices.billing", INVOICES)


class World:
    """An SNS topic for ``ORDERS`` with EMAIL and AUDIT subscribed, and a runtime on a
    SQLite lane carrying it beside the stored ``INVOICES`` topic."""

    def __init__(
        self,
        sns_world: SnsWorld,
        path: Path,
        lane: Callable[[SnsTransport], Lane] | None = None,
        environment: str = "shop",
    ) -> None:
        self.sns_world = sns_world
        arn = sns_world.topic()
        self.email: SnsSubscriptionBinding = sns_world.subscribe(arn, EMAIL)
        self.audit: SnsSubscriptionBinding = sns_world.subscribe(arn, AUDIT)
        self.transport = sns_transport(
            client=sns_world.sns,
            sqs_client=sns_world.sqs,
            topics=[sns_topic(ORDERS, topic_arn=arn)],
            subscriptions=[self.email, self.audit],
        )
        self.rl = Runlane(
            lane=(
                lane(self.transport)
                if lane is not None
                else sqlite_lane(path, topic_transport=self.transport)
            ),
            queues=[MAIN],
            tasks=[],
            topics=[ORDERS, INVOICES],
            subscriptions=[EMAIL, AUDIT, BILLING],
            environment=environment,
        )

    def lambda_invocation(self, binding: SnsSubscriptionBinding, expected: int) -> list[str]:
        """Receive ``expected`` messages and run the thin handler over them, as Lambda
        would; returns the reported failures (the rest are deleted, as Lambda does)."""
        world = self.sns_world
        messages = world.receive_all(binding.queue_url, expected=expected)
        assert len(messages) == expected
        handler = create_sns_lambda_handler(subscription=binding, client=world.sqs)
        response = handler(world.event(binding.queue_url, messages), None)
        failed = [item["itemIdentifier"] for item in response["batchItemFailures"]]
        world.delete(binding.queue_url, [m for m in messages if m["MessageId"] not in failed])
        return failed


@pytest.fixture
async def world(sns_world: SnsWorld, tmp_path: Path) -> AsyncIterator[World]:
    handled.clear()
    built = World(sns_world, tmp_path / "app.db")
    yield built
    built.rl.sync.close()  # a test using rl.sync opened the runtime on its loop
    await built.rl.close()


async def test_rl_publish_fans_out_by_filter_and_the_lambda_handler_settles(
    world: World,
) -> None:
    rl = world.rl
    paid = await rl.publish(ORDERS, {"order": 1}, attributes={"event": "paid"}, message_id="m1")
    created = await rl.publish("orders", {"order": 2}, attributes={"event": "created"})
    assert isinstance(paid, PublishReceipt)
    assert (paid.message_id, paid.topic, paid.duplicate, paid.runs, paid.sequence) == (
        "m1",
        "orders",
        False,
        [],
        None,
    )
    assert paid.provider_message_id and created.provider_message_id
    assert paid.published_at.tzinfo is not None
    # The filter policy: the email subscription gets the paid order only, audit both.
    email_bodies = [
        parse_sns_envelope(m["Body"])
        for m in world.sns_world.receive_all(world.email.queue_url, expected=1, within=5)
    ]
    assert [e.message.id for e in email_bodies] == ["m1"]
    assert email_bodies[0].environment == "shop"
    assert email_bodies[0].message.payload == {"order": 1}
    assert world.sns_world.receive(world.email.queue_url, wait=1) == []
    # The Lambda runtime calls the handler from plain synchronous code.
    assert await asyncio.to_thread(world.lambda_invocation, world.audit, 2) == []
    assert sorted(h[1] for h in handled) == sorted(["m1", created.message_id])
    assert {h[0] for h in handled} == {"orders.audit"}
    # Nothing was stored for a brokered topic.
    assert (await rl.runs.list()).data == []


def test_rl_dead_letters_list_get_replay_and_discard_an_sns_subscriptions_dlq(
    world: World,
) -> None:
    rl = world.rl
    rl.sync.publish(ORDERS, "dead", attributes={"event": "paid"}, message_id="m-dead")
    assert world.lambda_invocation(world.email, 1) == []
    page = rl.sync.dead_letters.list(subscription=EMAIL)
    assert page.next_cursor is None
    (letter,) = page.data
    assert isinstance(letter, DeadLetter)
    assert (letter.id, letter.subscription, letter.topic) == ("m-dead", "orders.email", "orders")
    assert (letter.reason, letter.attempt, letter.replays, letter.key) == (
        "refused by the handler",
        1,
        0,
        None,
    )
    assert letter.message.payload == "dead" and letter.message.attributes == {"event": "paid"}
    assert rl.sync.dead_letters.list(subscription="orders.email", topic=ORDERS).data == [letter]
    assert rl.sync.dead_letters.list(subscription="orders.email", key="other").data == []
    assert rl.sync.dead_letters.list(subscription="orders.audit").data == []
    assert rl.sync.dead_letters.get("m-dead", subscription="orders.email") == letter
    # Refused before anything changes: the dead letter stays.
    with pytest.raises(RunlaneError) as no_subscription:
        rl.sync.dead_letters.list(topic=ORDERS)
    assert no_subscription.value.code is ErrorCode.CONFIGURATION_INVALID
    with pytest.raises(RunlaneError) as paged:
        rl.sync.dead_letters.list(subscription=EMAIL, cursor="next")
    assert paged.value.code is ErrorCode.CONFIGURATION_INVALID
    with pytest.raises(RunlaneError) as bad_reason:
        rl.sync.dead_letters.discard("m-dead", subscription=EMAIL, reason=" ")
    assert bad_reason.value.code is ErrorCode.CONFIGURATION_INVALID
    with pytest.raises(RunlaneError) as stored_path:
        rl.sync.dead_letters.get("m-dead")  # without subscription=: looked for in storage
    assert stored_path.value.code is ErrorCode.DEAD_LETTER_NOT_FOUND
    assert rl.sync.dead_letters.get("m-dead", subscription=EMAIL) == letter

    replayed = rl.sync.dead_letters.replay(
        "m-dead", subscription=EMAIL, reason="fixed", actor="ops"
    )
    assert replayed is None
    assert rl.sync.dead_letters.list(subscription=EMAIL).data == []
    # Back on the subscription queue, seen as a replay with a fresh budget.
    assert world.lambda_invocation(world.email, 1) == []
    assert handled[-1] == ("orders.email", "m-dead", True, 1)
    (again,) = rl.sync.dead_letters.list(subscription=EMAIL).data
    assert again.id == "m-dead" and again.replays == 1

    assert rl.sync.dead_letters.discard("m-dead", subscription=EMAIL, reason="obsolete") is None
    assert rl.sync.dead_letters.list(subscription=EMAIL).data == []
    with pytest.raises(RunlaneError) as gone:
        rl.sync.dead_letters.get("m-dead", subscription=EMAIL)
    assert gone.value.code is ErrorCode.DEAD_LETTER_NOT_FOUND


async def test_rl_subscriptions_reads_approximate_counts_of_sns_subscriptions(
    world: World,
) -> None:
    rl = world.rl
    for index in range(2):
        await rl.publish(ORDERS, index, attributes={"event": "created"})
    await rl.publish(ORDERS, "dead", attributes={"event": "paid"})

    async def audit() -> SubscriptionStats:
        return await rl.subscriptions.get(AUDIT)

    stats = await audit()
    assert (stats.name, stats.topic, stats.queue, stats.counts) == (
        "orders.audit",
        "orders",
        None,
        {},
    )
    assert stats.approximate is True and stats.halted_keys == 0
    assert stats.mode.value == "none"
    waiting = stats.waiting
    for _ in range(25):  # SNS fans out asynchronously
        if waiting == 3:
            break
        await asyncio.sleep(0.2)
        waiting = (await audit()).waiting
    assert waiting == 3
    # The paid one, dead-lettered by the handler.
    assert await asyncio.to_thread(world.lambda_invocation, world.email, 1) == []
    email = await rl.subscriptions.get("orders.email")
    assert (email.waiting, email.running, email.dead_lettered) == (0, 0, 1)
    everything = await rl.subscriptions.list()
    assert [s.name for s in everything] == ["invoices.billing", "orders.audit", "orders.email"]
    assert [s.approximate for s in everything] == [False, True, True]
    assert everything[0].queue == "main"
    assert (await rl.subscriptions.halted_keys(EMAIL)).data == []


async def test_a_stored_topic_and_an_sns_topic_side_by_side_on_one_runtime(
    world: World,
) -> None:
    rl = world.rl
    assert set(rl.topics) == {"orders", "invoices"}
    stored = await rl.publish(INVOICES, "dead", message_id="inv-1", deduplication_key="inv")
    brokered = await rl.publish(ORDERS, "dead", attributes={"event": "paid"}, message_id="o-1")
    assert [run.task_id for run in stored.runs] == ["invoices.billing"]
    assert stored.sequence is not None and stored.provider_message_id is None
    assert brokered.runs == [] and brokered.sequence is None
    # The stored delivery runs in a worker; the SNS one in the thin Lambda handler.
    ran = await rl.execute_next()
    assert ran is not None and ran.status is RunStatus.DEAD_LETTERED
    assert await rl.execute_next() is None
    assert await asyncio.to_thread(world.lambda_invocation, world.email, 1) == []
    # Each dead letter is where its topic keeps them.
    assert [d.id for d in (await rl.dead_letters.list()).data] == [ran.id]
    assert [d.id for d in (await rl.dead_letters.list(subscription=EMAIL)).data] == ["o-1"]
    assert (await rl.dead_letters.list(topic=INVOICES, subscription=EMAIL)).data == []
    assert (await rl.dead_letters.list(topic=ORDERS, subscription=BILLING)).data == []
    with pytest.raises(RunlaneError) as unknown:
        await rl.dead_letters.list(topic="refunds", subscription=EMAIL)
    assert unknown.value.code is ErrorCode.TOPIC_NOT_FOUND
    replayed = await rl.dead_letters.replay(ran.id, reason="retry")
    assert replayed is not None and replayed.status is RunStatus.QUEUED
    # The SNS-only options are refused for the SNS topic and nothing is sent.
    for options in ({"deduplication_key": "k"}, {"connection": object()}):
        with pytest.raises(RunlaneError) as refused:
            await rl.publish(ORDERS, "x", attributes={"event": "paid"}, **options)
        assert refused.value.code is ErrorCode.CAPABILITY_UNSUPPORTED
    assert world.sns_world.receive(world.email.queue_url, wait=1) == []
    # Storage holds the stored topic's delivery only.
    runs = (await rl.runs.list()).data
    assert [run.task_id for run in runs] == ["invoices.billing"]


async def test_a_postgres_sqs_lane_wakes_stored_deliveries_and_publishes_sns_topics(
    sns_world: SnsWorld,
    sqs_queue_factory: Any,
    postgres_dsn: str,
    environment: str,
    tmp_path: Path,
) -> None:
    handled.clear()
    wakeups = sqs_queue_factory("main")
    sqs = sqs_transport(client=sns_world.sqs, queues=[sqs_queue(MAIN, queue_url=wakeups)])
    world = World(
        sns_world,
        tmp_path / "unused.db",
        lambda sns: postgres_sqs_lane(postgres=postgres_dsn, sqs=sqs, sns=sns),
        environment,
    )
    rl = world.rl
    await rl.migrate()
    async with rl:
        stored = await rl.publish(INVOICES, "ok", message_id="inv-1")
        brokered = await rl.publish(ORDERS, "ok", attributes={"event": "paid"}, message_id="o-1")
        assert [run.task_id for run in stored.runs] == ["invoices.billing"]
        assert brokered.runs == [] and brokered.provider_message_id
        # The stored delivery's wakeup went to the lane's SQS queue, the SNS message to
        # the subscriptions' own queues; neither crossed over.
        (wakeup,) = sns_world.receive_all(wakeups, expected=1, within=5)
        assert stored.runs[0].id in wakeup["Body"]
        assert await asyncio.to_thread(world.lambda_invocation, world.email, 1) == []
        assert handled == [("orders.email", "o-1", False, 1)]
        assert [run.task_id for run in (await rl.runs.list()).data] == ["invoices.billing"]
        names = [(s.name, s.approximate) for s in await rl.subscriptions.list()]
        assert names == [
            ("invoices.billing", False),
            ("orders.audit", True),
            ("orders.email", True),
        ]
