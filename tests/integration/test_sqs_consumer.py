"""The long-running SQS consumer against a real SQS server (Ministack) with real boto3."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.config import Config

from runlane import ErrorCode, RunlaneError, Signal, SignalReason
from runlane.ports.transport import DeliveryMessage
from runlane.sqs import (
    SqsDeliveryConsumer,
    SqsDeliveryFailure,
    SqsDeliveryFailurePhase,
    create_sqs_delivery_consumer,
    create_sqs_wakeup_body,
)

pytest_plugins = ["tests.support.ministack"]

QueueFactory = Callable[..., str]
#: How long a test waits for the consumer to get somewhere before failing.
PATIENCE_S = 15.0


def body(run_id: str) -> str:
    return create_sqs_wakeup_body(DeliveryMessage("test", run_id, "main"))


def send(client: Any, url: str, *bodies: str, group: str | None = None) -> None:
    for index, text in enumerate(bodies):
        extra = {"MessageGroupId": group, "MessageDeduplicationId": f"d-{index}"} if group else {}
        client.send_message(QueueUrl=url, MessageBody=text, **extra)


#: Visibility timeout of consumers whose leftovers a test inspects afterwards.
SHORT_VISIBILITY_S = 2


async def remaining_run_ids(client: Any, url: str) -> list[str]:
    """Run ids of every message left in the queue, once in-flight ones are visible again."""
    await asyncio.sleep(SHORT_VISIBILITY_S + 0.2)
    response = await asyncio.to_thread(
        client.receive_message,
        QueueUrl=url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=0,
        VisibilityTimeout=0,
    )
    return sorted(json.loads(m["Body"])["message"]["run_id"] for m in response.get("Messages", []))


def queue_arn(client: Any, url: str) -> str:
    attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


class Executor:
    """An ``execute_delivery`` stand-in: records calls, refuses runs named ``bad-*``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.changed = asyncio.Event()

    async def __call__(self, message: DeliveryMessage, **options: Any) -> str:
        self.calls.append((message.run_id, options))
        self.changed.set()
        if message.run_id.startswith("bad"):
            raise RuntimeError("the run could not be executed")
        if message.run_id.startswith("wait"):
            signal: Signal = options["signal"]
            return (await signal.wait()).value
        return "executed"

    @property
    def run_ids(self) -> list[str]:
        return [run_id for run_id, _ in self.calls]

    async def until(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(PATIENCE_S):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


def consumer_for(client: Any, url: str, execute: Executor, **options: Any) -> SqsDeliveryConsumer:
    return create_sqs_delivery_consumer(
        client=client,
        queue_url=url,
        execute_delivery=execute,
        wait_time_seconds=1,
        **options,
    )


async def test_resolved_wakeups_are_deleted_and_failed_ones_stay_for_redelivery(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("consume")
    send(sqs_client, url, body("ok-1"), body("bad-1"), body("ok-2"), body("bad-2"))
    failures: list[SqsDeliveryFailure] = []

    async def observe(failure: SqsDeliveryFailure) -> None:
        failures.append(failure)

    execute = Executor()
    consumer = consumer_for(
        sqs_client,
        url,
        execute,
        visibility_timeout_seconds=SHORT_VISIBILITY_S,
        on_delivery_failure=observe,
    )
    await consumer.start()
    await execute.until(lambda: len(execute.calls) == 4)
    await consumer.stop()
    await consumer.closed
    assert sorted(execute.run_ids)[:4] == ["bad-1", "bad-2", "ok-1", "ok-2"]
    assert await remaining_run_ids(sqs_client, url) == ["bad-1", "bad-2"]
    assert {f.delivery_message.run_id for f in failures if f.delivery_message} == {
        "bad-1",
        "bad-2",
    }
    for failure in failures:
        assert failure.phase is SqsDeliveryFailurePhase.EXECUTE
        assert failure.queue_url == url and failure.provider_message_id
        assert isinstance(failure.cause, RuntimeError)


async def test_malformed_bodies_are_redriven_to_the_dead_letter_queue(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    dlq = sqs_queue_factory("dlq")
    redrive = json.dumps({"deadLetterTargetArn": queue_arn(sqs_client, dlq), "maxReceiveCount": 2})
    url = sqs_queue_factory("poison", RedrivePolicy=redrive)
    send(sqs_client, url, "not a wakeup", body("ok-1"), '{"type": "runlane.wakeup"}')
    phases: list[SqsDeliveryFailurePhase] = []
    execute = Executor()
    consumer = consumer_for(
        sqs_client,
        url,
        execute,
        visibility_timeout_seconds=1,
        on_delivery_failure=lambda f: phases.append(f.phase),
    )
    await consumer.start()
    dead: list[str] = []
    async with asyncio.timeout(PATIENCE_S):
        while len(dead) < 2:
            response = await asyncio.to_thread(
                sqs_client.receive_message, QueueUrl=dlq, MaxNumberOfMessages=10, WaitTimeSeconds=1
            )
            dead.extend(m["Body"] for m in response.get("Messages", []))
    await consumer.stop()
    await consumer.closed
    assert sorted(dead) == sorted(["not a wakeup", '{"type": "runlane.wakeup"}'])
    assert execute.run_ids == ["ok-1"]
    assert set(phases) == {SqsDeliveryFailurePhase.PARSE} and len(phases) >= 4
    assert await remaining_run_ids(sqs_client, url) == []


async def test_a_fifo_batch_stops_at_its_first_failure_and_keeps_the_rest(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("ordered", fifo=True)
    send(sqs_client, url, body("ok-1"), body("bad-2"), body("ok-3"), group="main")
    execute = Executor()
    consumer = consumer_for(
        sqs_client, url, execute, fifo=True, visibility_timeout_seconds=SHORT_VISIBILITY_S
    )
    await consumer.start()
    await execute.until(lambda: "bad-2" in execute.run_ids)
    await consumer.stop()
    await consumer.closed
    assert execute.run_ids[:2] == ["ok-1", "bad-2"] and "ok-3" not in execute.run_ids
    assert await remaining_run_ids(sqs_client, url) == ["bad-2", "ok-3"]


async def test_a_failed_delete_is_reported_and_the_loop_keeps_receiving(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("lost-handle")
    send(sqs_client, url, body("slow-1"))
    failures: list[SqsDeliveryFailure] = []
    execute = Executor()

    async def slow_then_stolen(message: DeliveryMessage, **options: Any) -> str:
        if message.run_id == "slow-1":
            # Meanwhile another receiver takes the message: our receipt handle goes stale.
            await asyncio.sleep(1.2)
            stolen = await asyncio.to_thread(
                sqs_client.receive_message, QueueUrl=url, VisibilityTimeout=30
            )
            assert stolen.get("Messages"), "the message should be visible again"
        return await execute(message, **options)

    consumer = create_sqs_delivery_consumer(
        client=sqs_client,
        queue_url=url,
        execute_delivery=slow_then_stolen,
        wait_time_seconds=1,
        visibility_timeout_seconds=1,
        on_delivery_failure=failures.append,
    )
    await consumer.start()
    await execute.until(lambda: execute.run_ids == ["slow-1"])
    send(sqs_client, url, body("ok-2"))
    await execute.until(lambda: "ok-2" in execute.run_ids)
    await consumer.stop()
    await consumer.closed
    (failure,) = failures
    assert failure.phase is SqsDeliveryFailurePhase.DELETE
    assert failure.delivery_message == DeliveryMessage("test", "slow-1", "main")
    assert isinstance(failure.cause, RunlaneError)
    assert failure.cause.meta["provider_code"] == "ReceiptHandleIsInvalid"


async def test_stop_sets_the_signal_that_running_deliveries_see(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("shutdown")
    send(sqs_client, url, body("wait-1"))
    execute = Executor()
    consumer = consumer_for(sqs_client, url, execute, visibility_timeout_seconds=SHORT_VISIBILITY_S)
    await consumer.start()
    await execute.until(lambda: execute.run_ids == ["wait-1"])
    _, options = execute.calls[0]
    assert options["signal"] is consumer.signal and not consumer.signal.is_set()
    await consumer.stop()
    assert consumer.signal.reason is SignalReason.SHUTDOWN
    await consumer.closed
    assert await remaining_run_ids(sqs_client, url) == [], "the resolved delivery was deleted"


async def test_a_forwarded_signal_reaches_deliveries_and_stops_the_consumer(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("forwarded")
    send(sqs_client, url, body("wait-1"))
    execute = Executor()
    stop = Signal()
    consumer = consumer_for(
        sqs_client,
        url,
        execute,
        delivery_options={"signal": stop, "lease_duration": "2m", "worker_id": "consumer-1"},
    )
    await consumer.start()
    await execute.until(lambda: execute.run_ids == ["wait-1"])
    _, options = execute.calls[0]
    assert options == {"signal": consumer.signal, "lease_duration": "2m", "worker_id": "consumer-1"}
    stop.set(SignalReason.CANCELLED)
    async with asyncio.timeout(PATIENCE_S):
        await consumer.closed
    assert consumer.signal.reason is SignalReason.CANCELLED
    assert not consumer.running


async def test_start_is_idempotent_and_a_stopped_consumer_stays_stopped(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    consumer = consumer_for(sqs_client, sqs_queue_factory("lifecycle"), Executor())
    with pytest.raises(RunlaneError) as not_started:
        consumer.closed  # noqa: B018 - the property raises
    assert not_started.value.code is ErrorCode.INVALID_STATE
    await consumer.start()
    await consumer.start()
    assert consumer.running
    await consumer.stop()
    await consumer.stop()
    await consumer.closed
    with pytest.raises(RunlaneError) as restarted:
        await consumer.start()
    assert restarted.value.code is ErrorCode.INVALID_STATE


async def test_stop_does_not_wait_for_a_long_poll(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    consumer = create_sqs_delivery_consumer(
        client=sqs_client,
        queue_url=sqs_queue_factory("long-poll"),
        execute_delivery=Executor(),
        wait_time_seconds=20,
    )
    await consumer.start()
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await consumer.stop()
    assert time.monotonic() - started < 1.0


async def test_a_receive_failure_closes_the_consumer_with_a_typed_error(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("vanishing")
    sqs_client.delete_queue(QueueUrl=url)
    consumer = consumer_for(sqs_client, url, Executor())
    await consumer.start()
    with pytest.raises(RunlaneError) as raised:
        async with asyncio.timeout(PATIENCE_S):
            await consumer.closed
    assert raised.value.code is ErrorCode.TRANSPORT_UNAVAILABLE
    assert raised.value.retryable is False
    assert raised.value.meta["operation"] == "ReceiveMessage"
    assert not consumer.running


async def test_an_unreachable_server_closes_the_consumer_as_retryable() -> None:
    client = boto3.client(
        "sqs",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    consumer = consumer_for(client, "http://127.0.0.1:9/000000000000/main", Executor())
    await consumer.start()
    with pytest.raises(RunlaneError) as raised:
        async with asyncio.timeout(PATIENCE_S):
            await consumer.closed
    assert raised.value.code is ErrorCode.TRANSPORT_UNAVAILABLE and raised.value.retryable


async def test_an_observer_that_raises_closes_the_consumer_after_deleting_what_resolved(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("observer")
    send(sqs_client, url, body("ok-1"), body("bad-1"))

    def observe(failure: SqsDeliveryFailure) -> None:
        raise ValueError("observer broke")

    execute = Executor()
    consumer = consumer_for(
        sqs_client,
        url,
        execute,
        visibility_timeout_seconds=SHORT_VISIBILITY_S,
        on_delivery_failure=observe,
    )
    await consumer.start()
    with pytest.raises(ValueError, match="observer broke"):
        async with asyncio.timeout(PATIENCE_S):
            await consumer.closed
    assert sorted(execute.run_ids) == ["bad-1", "ok-1"]
    assert await remaining_run_ids(sqs_client, url) == ["bad-1"]


@pytest.mark.parametrize(
    "options",
    [
        {"client": object()},
        {"queue_url": "main"},
        {"queue_url": "http://127.0.0.1:4566/000000000000/orders.fifo"},
        {"fifo": True},
        {"fifo": "yes"},
        {"execute_delivery": None},
        {"on_delivery_failure": "log"},
        {"max_number_of_messages": 0},
        {"max_number_of_messages": 11},
        {"wait_time_seconds": 21},
        {"wait_time_seconds": -1},
        {"visibility_timeout_seconds": 43_201},
        {"visibility_timeout_seconds": 1.5},
        {"delivery_options": {"visibility_timeout": 30}},
        {"delivery_options": {"heartbeat_interval": "-1s"}},
        {"delivery_options": {"signal": True}},
    ],
)
def test_consumer_options_are_validated_when_it_is_created(
    sqs_client: Any, options: dict[str, Any]
) -> None:
    arguments: dict[str, Any] = {
        "client": sqs_client,
        "queue_url": "http://127.0.0.1:4566/000000000000/main",
        "execute_delivery": Executor(),
    }
    with pytest.raises(RunlaneError) as raised:
        create_sqs_delivery_consumer(**{**arguments, **options})
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
