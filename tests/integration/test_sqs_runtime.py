"""Runlane end to end over SQS: trigger → outbox → SQS (Ministack) → consumer or Lambda."""

from __future__ import annotations

import asyncio
import io
import textwrap
import uuid
import zipfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    RetryPolicy,
    Runlane,
    RunlaneError,
    RunStatus,
    queue,
    sqlite_lane,
    task,
)
from runlane.ports.transport import DeliveryMessage, DeliveryOutcome, DeliveryResult, IgnoredReason
from runlane.sqs import (
    SqsDeliveryConsumer,
    SqsFifo,
    create_sqs_delivery_consumer,
    create_sqs_wakeup_body,
    sqs_queue,
    sqs_transport,
)
from runlane.testing import wait_for_status

pytest_plugins = ["tests.support.ministack"]

MAIN = queue("main", default=True)
OTHER = queue("other")
QueueFactory = Callable[..., str]
#: Real-time patience for work that crosses the emulator.
PATIENCE_S = 20.0


@task("sqs.echo")
async def echo(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    return {"n": payload["n"], "attempt": ctx.attempt}


@task("sqs.refuse", retry=RetryPolicy(max_attempts=1))
async def refuse(payload: dict[str, Any], ctx: Context) -> None:
    raise RuntimeError("this task always fails")


flaky_attempts: list[int] = []


@task("sqs.flaky", retry=RetryPolicy(max_attempts=2, initial_delay="100ms", jitter=False))
async def flaky(payload: dict[str, Any], ctx: Context) -> int:
    flaky_attempts.append(ctx.attempt)
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails")
    return ctx.attempt


TASKS = [echo, refuse, flaky]


class RecordingDelivery:
    """Wraps ``rl.execute_delivery`` and keeps every result."""

    def __init__(self, rl: Runlane) -> None:
        self.rl = rl
        self.results: list[DeliveryResult] = []

    async def __call__(self, message: DeliveryMessage, **options: Any) -> DeliveryResult:
        result = await self.rl.execute_delivery(message, **options)
        self.results.append(result)
        return result


def in_flight(sqs_client: Any, url: str) -> int:
    """Messages still in the queue, visible or not."""
    attributes = sqs_client.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


async def eventually(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (off the loop: it may call boto3) until it holds."""
    async with asyncio.timeout(PATIENCE_S):
        while True:
            if await asyncio.to_thread(condition):
                return
            await asyncio.sleep(0.1)


@asynccontextmanager
async def consuming(consumer: SqsDeliveryConsumer) -> AsyncIterator[SqsDeliveryConsumer]:
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()
        await consumer.closed


def runtime(path: Path, environment: str, transport: Any, **options: Any) -> Runlane:
    return Runlane(
        lane=sqlite_lane(path, transport=transport),
        queues=[MAIN],
        tasks=TASKS,
        environment=environment,
        **options,
    )


async def test_triggered_runs_travel_through_sqs_to_a_consumer_and_succeed(
    sqs_client: Any, sqs_queue_factory: QueueFactory, tmp_path: Path, environment: str
) -> None:
    url = sqs_queue_factory("e2e")
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])
    async with runtime(tmp_path / "runlane.db", environment, transport) as rl:
        runs = await rl.trigger_many(echo, [{"n": n} for n in range(12)])
        assert in_flight(sqs_client, url) == 12, "one SQS message per triggered run"
        consumer = create_sqs_delivery_consumer(
            client=sqs_client,
            queue_url=url,
            execute_delivery=rl.execute_delivery,
            delivery_options={"lease_duration": "1m"},
            wait_time_seconds=1,
        )
        async with consuming(consumer):
            done = [
                await wait_for_status(rl, run.id, RunStatus.SUCCEEDED, within=PATIENCE_S)
                for run in runs
            ]
        assert [run.result for run in done] == [{"n": n, "attempt": 1} for n in range(12)]
        assert in_flight(sqs_client, url) == 0, "every resolved wakeup was deleted"


async def test_a_fifo_lane_delivers_through_a_fifo_consumer(
    sqs_client: Any, sqs_queue_factory: QueueFactory, tmp_path: Path, environment: str
) -> None:
    url = sqs_queue_factory("e2e", fifo=True)
    transport = sqs_transport(
        client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url, fifo=SqsFifo())]
    )
    async with runtime(tmp_path / "runlane.db", environment, transport) as rl:
        runs = [await rl.trigger(echo, {"n": n}) for n in range(5)]
        consumer = create_sqs_delivery_consumer(
            client=sqs_client,
            queue_url=url,
            execute_delivery=rl.execute_delivery,
            fifo=True,
            wait_time_seconds=1,
        )
        async with consuming(consumer):
            for run in runs:
                await wait_for_status(rl, run.id, RunStatus.SUCCEEDED, within=PATIENCE_S)
        assert in_flight(sqs_client, url) == 0


async def test_stale_duplicate_and_foreign_wakeups_are_ignored_and_acknowledged(
    sqs_client: Any, sqs_queue_factory: QueueFactory, tmp_path: Path, environment: str
) -> None:
    url = sqs_queue_factory("ignored")
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])
    async with runtime(tmp_path / "runlane.db", environment, transport) as rl:
        run = await rl.trigger(echo, {"n": 1})
        delivery = RecordingDelivery(rl)
        consumer = create_sqs_delivery_consumer(
            client=sqs_client, queue_url=url, execute_delivery=delivery, wait_time_seconds=1
        )
        async with consuming(consumer):
            await wait_for_status(rl, run.id, RunStatus.SUCCEEDED, within=PATIENCE_S)
            stale = [
                DeliveryMessage(environment, run.id, "main"),
                DeliveryMessage(environment, f"missing-{uuid.uuid4().hex}", "main"),
                DeliveryMessage("someone-else", run.id, "main"),
                DeliveryMessage(environment, run.id, "other"),
            ]
            for message in stale:
                sqs_client.send_message(QueueUrl=url, MessageBody=create_sqs_wakeup_body(message))
            await eventually(lambda: len(delivery.results) == 5 and in_flight(sqs_client, url) == 0)
        executed, *ignored = delivery.results
        assert executed.outcome is DeliveryOutcome.EXECUTED
        assert {result.outcome for result in ignored} == {DeliveryOutcome.IGNORED}
        assert sorted(result.reason for result in ignored if result.reason) == sorted(
            [
                IgnoredReason.TERMINAL,
                IgnoredReason.NOT_FOUND,
                IgnoredReason.ENVIRONMENT_MISMATCH,
                IgnoredReason.WRONG_QUEUE,
            ]
        )


async def test_a_failed_task_is_a_handled_delivery_and_its_message_is_deleted(
    sqs_client: Any, sqs_queue_factory: QueueFactory, tmp_path: Path, environment: str
) -> None:
    url = sqs_queue_factory("failing")
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])
    async with runtime(tmp_path / "runlane.db", environment, transport) as rl:
        run = await rl.trigger(refuse, {})
        consumer = create_sqs_delivery_consumer(
            client=sqs_client,
            queue_url=url,
            execute_delivery=rl.execute_delivery,
            wait_time_seconds=1,
        )
        async with consuming(consumer):
            failed = await wait_for_status(rl, run.id, RunStatus.FAILED, within=PATIENCE_S)
        assert failed.failure is not None
        assert in_flight(sqs_client, url) == 0


async def test_a_retry_is_woken_again_through_sqs_by_tick(
    sqs_client: Any, sqs_queue_factory: QueueFactory, tmp_path: Path, environment: str
) -> None:
    url = sqs_queue_factory("retrying")
    flaky_attempts.clear()
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])
    async with runtime(tmp_path / "runlane.db", environment, transport) as rl:
        run = await rl.trigger(flaky, {})
        consumer = create_sqs_delivery_consumer(
            client=sqs_client,
            queue_url=url,
            execute_delivery=rl.execute_delivery,
            wait_time_seconds=1,
        )
        async with consuming(consumer), asyncio.timeout(PATIENCE_S):
            while (await rl.runs.get(run.id)).status is not RunStatus.SUCCEEDED:
                await rl.tick()
                await asyncio.sleep(0.2)
        assert flaky_attempts == [1, 2]
        assert (await rl.runs.get(run.id)).result == 2


async def test_wakeups_published_while_sqs_is_down_wait_in_the_outbox_until_tick(
    ministack_server: Any,
    sqs_client: Any,
    sqs_queue_factory: QueueFactory,
    tmp_path: Path,
    environment: str,
) -> None:
    url = sqs_queue_factory("outage")
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])
    async with runtime(tmp_path / "runlane.db", environment, transport) as rl:
        ministack_server.stop()
        try:
            runs = [await rl.trigger(echo, {"n": n}) for n in range(3)]
            stored = [await rl.runs.get(run.id) for run in runs]
            assert {run.status for run in stored} == {RunStatus.QUEUED}, "triggers committed"
        finally:
            ministack_server.start()
        assert in_flight(sqs_client, url) == 0, "nothing reached SQS during the outage"
        published = 0
        async with asyncio.timeout(PATIENCE_S):
            while published < 3:
                published += (await rl.tick()).outbox_published
                await asyncio.sleep(0.2)
        consumer = create_sqs_delivery_consumer(
            client=sqs_client,
            queue_url=url,
            execute_delivery=rl.execute_delivery,
            wait_time_seconds=1,
        )
        async with consuming(consumer):
            for run in runs:
                await wait_for_status(rl, run.id, RunStatus.SUCCEEDED, within=PATIENCE_S)


def test_the_registry_needs_a_binding_for_every_queue_without_policy_drift(
    sqs_client: Any, tmp_path: Path
) -> None:
    url = "http://127.0.0.1:4566/000000000000/main"
    only_main = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])
    with pytest.raises(RunlaneError) as missing:
        Runlane(
            lane=sqlite_lane(tmp_path / "a.db", transport=only_main),
            queues=[MAIN, OTHER],
            tasks=TASKS,
        )
    assert missing.value.code is ErrorCode.CONFIGURATION_INVALID
    drifted = sqs_transport(
        client=sqs_client,
        queues=[sqs_queue(queue("main", default=True, concurrency_limit=3), queue_url=url)],
    )
    with pytest.raises(RunlaneError) as drift:
        Runlane(lane=sqlite_lane(tmp_path / "b.db", transport=drifted), queues=[MAIN], tasks=TASKS)
    assert drift.value.code is ErrorCode.QUEUE_POLICY_DRIFT


# -- Lambda: a module-level runtime behind a real event source mapping --------------------

LAMBDA_SOURCE = """
import os

import boto3

from runlane import Runlane, queue, sqlite_lane, task
from runlane.sqs import create_sqs_lambda_handler, sqs_queue, sqs_transport

main = queue("main", default=True)


@task("sqs.lambda_echo")
async def lambda_echo(payload, ctx):
    return {"n": payload["n"], "pid": os.getpid()}


client = boto3.client(
    "sqs",
    endpoint_url=os.environ["SQS_ENDPOINT"],
    region_name="us-east-1",
    aws_access_key_id="test",
    aws_secret_access_key="test",
)
runtime = Runlane(
    lane=sqlite_lane(
        os.environ["DB_PATH"],
        transport=sqs_transport(
            client=client, queues=[sqs_queue(main, queue_url=os.environ["QUEUE_URL"])]
        ),
    ),
    queues=[main],
    tasks=[lambda_echo],
    environment=os.environ["RUNLANE_ENVIRONMENT"],
)
handler = create_sqs_lambda_handler(
    execute_delivery=runtime.execute_delivery, delivery_options={"lease_duration": "2m"}
)
"""


@task("sqs.lambda_echo")
async def lambda_echo(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    raise AssertionError("this process only triggers; the Lambda function executes")


async def test_a_lambda_function_executes_runs_from_its_event_source_mapping(
    sqs_client: Any,
    lambda_client: Any,
    sqs_queue_factory: QueueFactory,
    ministack_endpoint: str,
    tmp_path: Path,
    environment: str,
) -> None:
    url = sqs_queue_factory("lambda-e2e", VisibilityTimeout="10")
    database = tmp_path / "runlane.db"
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("handler.py", textwrap.dedent(LAMBDA_SOURCE))
    function = f"runlane-e2e-{uuid.uuid4().hex[:10]}"
    lambda_client.create_function(
        FunctionName=function,
        Runtime="python3.11",
        Role="arn:aws:iam::000000000000:role/runlane-lambda",
        Handler="handler.handler",
        Code={"ZipFile": archive.getvalue()},
        Timeout=60,
        Environment={
            "Variables": {
                "SQS_ENDPOINT": ministack_endpoint,
                "DB_PATH": str(database),
                "QUEUE_URL": url,
                "RUNLANE_ENVIRONMENT": environment,
            }
        },
    )
    arn = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    mapping = lambda_client.create_event_source_mapping(
        FunctionName=function,
        EventSourceArn=arn["Attributes"]["QueueArn"],
        BatchSize=10,
        FunctionResponseTypes=["ReportBatchItemFailures"],
    )
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])
    try:
        rl = Runlane(
            lane=sqlite_lane(database, transport=transport),
            queues=[MAIN],
            tasks=[lambda_echo],
            environment=environment,
        )
        async with rl:
            runs = await rl.trigger_many(lambda_echo, [{"n": n} for n in range(15)])
            done = [
                await wait_for_status(rl, run.id, RunStatus.SUCCEEDED, within=60) for run in runs
            ]
        assert [run.result["n"] for run in done if run.result] == list(range(15))
        # More runs than one batch: warm invocations reuse the module-level runtime. The
        # emulator may start a second warm container when the machine is busy, so the
        # check is that processes served several runs each, not that there was one.
        assert len({run.result["pid"] for run in done if run.result}) < len(done) // 2
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    finally:
        lambda_client.delete_event_source_mapping(UUID=mapping["UUID"])
        lambda_client.delete_function(FunctionName=function)
