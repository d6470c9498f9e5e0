"""The thin Lambda consumer of SNS subscriptions, against real SQS queues on Ministack.

Most tests publish through SNS, receive the messages as an event source mapping
would and hand them to the handler as Lambda does (``lambda_like`` then deletes
what the handler acknowledged, as Lambda does); the last one deploys the handler
as a function behind a real event source mapping.
"""

from __future__ import annotations

import asyncio
import io
import json
import textwrap
import time
import uuid
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import BaseModel

from runlane import ErrorCode, RetryPolicy, RunlaneError
from runlane.sns import (
    SnsSubscriptionBinding,
    create_sns_lambda_handler,
    create_sns_message_body,
    sns_subscription,
    sns_topic,
    sns_transport,
)
from runlane.topics.definitions import SubscriptionDef, subscription, topic
from runlane.topics.messages import DeliveryContext, Message
from runlane.topics.outcomes import FatalWorkError, Outcome, TransientWorkError

if TYPE_CHECKING:
    from tests.support.sns_world import SnsWorld

pytest_plugins = ["tests.support.ministack", "tests.support.sns_world"]

NOW = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
QUICK = RetryPolicy(max_attempts=3, initial_delay="1s", max_delay="1s", jitter=False)


class Job(BaseModel):
    do: str
    n: int = 0


JOBS = topic("jobs", schema=Job)


class Recorder:
    """A subscription handler that does what the payload says and remembers each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Message[Any], DeliveryContext]] = []

    def handler(self) -> Callable[[Message[Job], DeliveryContext], Any]:
        """An async function (what ``subscription`` recognises as async) calling :meth:`run`."""

        async def handle(message: Message[Job], ctx: DeliveryContext) -> Any:
            return await self.run(message, ctx)

        return handle

    async def run(self, message: Message[Job], ctx: DeliveryContext) -> Any:
        self.calls.append((message, ctx))
        do = message.payload.do
        if do == "complete":
            return Outcome.complete()
        if do == "retry":
            return Outcome.retry("not yet", delay="0s")
        if do == "retry-later":
            return Outcome.retry("not yet", delay="30s")
        if do == "dead":
            return Outcome.dead_letter("cannot be done")
        if do == "fatal":
            raise FatalWorkError("broken for good")
        if do == "transient":
            raise TransientWorkError("busy", retry_after="0s")
        if do == "raise":
            raise ValueError("boom")
        if do == "cancel":
            raise asyncio.CancelledError
        if do == "release":
            return ctx.release("0s")
        if do == "junk":
            return 42
        if do == "slow":
            await asyncio.sleep(5)
        if do == "heartbeat":
            await ctx.heartbeat()
        if do == "wait-for-signal":
            await ctx.signal.wait()
            return Outcome.retry("stopped before the deadline", delay="0s")
        return None

    def ran(self) -> list[str]:
        return [message.id for message, _ in self.calls]


def jobs_subscription(
    recorder: Recorder, name: str = "jobs.work", **options: Any
) -> SubscriptionDef:
    options.setdefault("retry", QUICK)
    return subscription(name, topic=JOBS, handler=recorder.handler(), **options)


def publish(
    world: SnsWorld,
    arn: str,
    *messages: tuple[str, dict[str, Any], dict[str, str]],
    group: str | None = None,
) -> None:
    transport = sns_transport(
        client=world.sns, topics=[sns_topic(JOBS, topic_arn=arn, message_group=group)]
    )

    async def send() -> None:
        for message_id, payload, attributes in messages:
            await transport.publish_message(
                JOBS,
                payload,
                environment="test",
                now=NOW,
                message_id=message_id,
                attributes=attributes,
            )

    asyncio.run(send())


def job(message_id: str, do: str, **attributes: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    return message_id, {"do": do}, attributes


def lambda_like(
    world: SnsWorld,
    binding: SnsSubscriptionBinding,
    handler: Callable[..., Any],
    *,
    expected: int,
    context: Any = None,
) -> tuple[list[str], dict[str, str]]:
    """One invocation: receive ``expected`` messages, call the handler, delete what it acked.

    Returns the failed SQS message ids and the SNS message id of each SQS message id.
    """
    messages = world.receive_all(binding.queue_url, expected=expected)
    assert len(messages) == expected
    event = world.event(binding.queue_url, messages)
    response = handler(event, context)
    failed = [item["itemIdentifier"] for item in response["batchItemFailures"]]
    world.delete(binding.queue_url, [m for m in messages if m["MessageId"] not in failed])
    ids = {m["MessageId"]: message_id_of(m["Body"]) for m in messages}
    return failed, ids


def message_id_of(body: str) -> str:
    """The message id of an envelope body, or the body itself when it is not one."""
    return str(json.loads(body)["message"]["id"]) if body.startswith("{") else body


def dead_letters(
    world: SnsWorld, binding: SnsSubscriptionBinding, expected: int
) -> dict[str, dict[str, str]]:
    """The DLQ copies by message id, with their string attributes."""
    messages = world.receive_all(binding.dead_letter_queue_url, expected=expected, within=5)
    world.delete(binding.dead_letter_queue_url, messages)
    return {
        message_id_of(m["Body"]): {
            name: value["StringValue"] for name, value in m.get("MessageAttributes", {}).items()
        }
        for m in messages
    }


def setup(
    world: SnsWorld, recorder: Recorder, **options: Any
) -> tuple[str, SnsSubscriptionBinding, Any]:
    fifo = options.pop("fifo", False)
    arn = world.topic(fifo=fifo)
    binding = world.subscribe(arn, jobs_subscription(recorder, **options))
    return arn, binding, create_sns_lambda_handler(subscription=binding, client=world.sqs)


def test_each_outcome_is_settled_on_the_queue(sns_world: SnsWorld) -> None:
    recorder = Recorder()
    arn, binding, handler = setup(sns_world, recorder)
    publish(
        sns_world,
        arn,
        job("ok", "complete"),
        job("none", "none"),
        job("retry", "retry"),
        job("later", "retry-later"),
        job("dead", "dead"),
        job("fatal", "fatal"),
        job("transient", "transient"),
        job("raise", "raise"),
        job("release", "release"),
        job("junk", "junk"),
    )
    failed, ids = lambda_like(sns_world, binding, handler, expected=10)
    assert sorted(ids[f] for f in failed) == [
        "junk",
        "later",
        "raise",
        "release",
        "retry",
        "transient",
    ]
    assert sorted(recorder.ran()) == sorted(ids.values())
    # Retries and releases with no delay are back at once, their receive counted; the one
    # retrying in 30 s and the backoff of 1 s (raise, junk) are hidden for now.
    again = sns_world.receive(binding.queue_url, wait=0, visibility=60)
    back = {
        json.loads(m["Body"])["message"]["id"]: m["Attributes"]["ApproximateReceiveCount"]
        for m in again
    }
    assert back == {"retry": "2", "transient": "2", "release": "2"}
    later = sns_world.receive_all(binding.queue_url, expected=2, within=4.5)
    assert sorted(json.loads(m["Body"])["message"]["id"] for m in later) == ["junk", "raise"]
    copies = dead_letters(sns_world, binding, 2)
    assert set(copies) == {"dead", "fatal"}
    dead = copies["dead"]
    assert dead["runlane_dead_letter_reason"] == "cannot be done"
    assert dead["runlane_attempt"] == "1" and dead["runlane_subscription"] == "jobs.work"
    assert "runlane_failure" not in dead
    assert datetime.fromisoformat(dead["runlane_dead_lettered_at"]).tzinfo is not None
    assert set(dead) == {
        "runlane_dead_letter_reason",
        "runlane_attempt",
        "runlane_dead_lettered_at",
        "runlane_subscription",
    }
    fatal = copies["fatal"]
    assert fatal["runlane_dead_letter_reason"] == "broken for good"
    failure = json.loads(fatal["runlane_failure"])
    assert failure["code"] == "task_failed" and failure["retryable"] is False
    assert failure["meta"]["exception_type"] == "FatalWorkError"


def test_a_cancelled_error_the_handler_raises_fails_its_record_only(sns_world: SnsWorld) -> None:
    recorder = Recorder()
    arn, binding, handler = setup(sns_world, recorder)
    publish(sns_world, arn, job("ok", "complete"), job("cancel", "cancel"), job("dead", "dead"))
    failed, ids = lambda_like(sns_world, binding, handler, expected=3)
    # Only its own record is handed back for another delivery; the others were settled.
    assert [ids[f] for f in failed] == ["cancel"]
    assert sorted(recorder.ran()) == ["cancel", "dead", "ok"]
    assert set(dead_letters(sns_world, binding, 1)) == {"dead"}
    again = sns_world.receive_all(binding.queue_url, expected=1, within=4.5)
    assert [json.loads(m["Body"])["message"]["id"] for m in again] == ["cancel"]


def test_the_handler_gets_the_validated_payload_and_the_delivery_context(
    sns_world: SnsWorld,
) -> None:
    recorder = Recorder()
    arn, binding, handler = setup(
        sns_world, recorder, fifo=True, mode="exclusive", key="customer", timeout="30s"
    )
    publish(sns_world, arn, job("m1", "heartbeat", customer="c1"), group="customer")
    failed, ids = lambda_like(sns_world, binding, handler, expected=1)
    assert failed == []
    ((message, ctx),) = recorder.calls
    assert isinstance(message.payload, Job) and message.payload.do == "heartbeat"
    assert message.attributes == {"customer": "c1"} and message.sequence is None
    assert message.published_at == NOW
    assert ctx.run_id == next(iter(ids)) and ctx.message_id == "m1"
    assert ctx.subscription == ctx.task_id == "jobs.work" and ctx.topic == "jobs"
    assert ctx.key == "c1" and ctx.attempt == 1 and ctx.max_attempts == 3
    assert ctx.is_replay is False and ctx.queue == binding.queue_name
    assert not ctx.signal.is_set()


def test_spent_retries_end_in_the_dead_letter_queue_with_the_last_failure(
    sns_world: SnsWorld,
) -> None:
    recorder = Recorder()
    retry = RetryPolicy(max_attempts=2, initial_delay="1s", max_delay="1s", jitter=False)
    arn, binding, handler = setup(sns_world, recorder, retry=retry)
    publish(sns_world, arn, job("doomed", "transient"))
    first, _ = lambda_like(sns_world, binding, handler, expected=1)
    second, _ = lambda_like(sns_world, binding, handler, expected=1)
    assert len(first) == 1 and second == []
    assert [ctx.attempt for _, ctx in recorder.calls] == [1, 2]
    copy = dead_letters(sns_world, binding, 1)["doomed"]
    assert copy["runlane_dead_letter_reason"] == "max_attempts_exceeded"
    assert copy["runlane_attempt"] == "2"
    assert json.loads(copy["runlane_failure"])["message"] == "Task raised TransientWorkError."
    assert sns_world.receive(binding.queue_url, wait=0) == []


def test_a_message_received_too_often_is_dead_lettered_without_running(sns_world: SnsWorld) -> None:
    recorder = Recorder()
    retry = RetryPolicy(max_attempts=1, initial_delay="1s", max_delay="1s")
    arn, binding, handler = setup(sns_world, recorder, retry=retry)
    publish(sns_world, arn, job("crashy", "complete"))
    for _ in range(3):  # a consumer that crashed three times: receives counted, nothing settled
        (message,) = sns_world.receive_all(binding.queue_url, expected=1)
        sns_world.sqs.change_message_visibility(
            QueueUrl=binding.queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    failed, _ = lambda_like(sns_world, binding, handler, expected=1)
    assert failed == [] and recorder.calls == []
    copy = dead_letters(sns_world, binding, 1)["crashy"]
    assert copy["runlane_dead_letter_reason"] == "max_attempts_exceeded"
    assert copy["runlane_attempt"] == "4" and "runlane_failure" not in copy


def test_bodies_that_are_not_envelopes_are_dead_lettered_and_filters_are_checked_again(
    sns_world: SnsWorld,
) -> None:
    recorder = Recorder()
    _, binding, handler = setup(sns_world, recorder, filter={"kind": ["a"]})
    sns_world.sqs.send_message(QueueUrl=binding.queue_url, MessageBody="not an envelope")
    stray = Message(
        id="stray",
        topic="jobs",
        payload={"do": "complete"},
        attributes={"kind": "b"},
        published_at=NOW,
        sequence=None,
    )
    sns_world.sqs.send_message(
        QueueUrl=binding.queue_url, MessageBody=create_sns_message_body(stray, environment="test")
    )
    failed, _ = lambda_like(sns_world, binding, handler, expected=2)
    assert failed == [] and recorder.calls == []
    copy = dead_letters(sns_world, binding, 1)["not an envelope"]
    assert copy["runlane_dead_letter_reason"] == "invalid_envelope"
    assert json.loads(copy["runlane_failure"])["code"] == "adapter_contract_violation"


def test_a_payload_that_fails_the_schema_is_dead_lettered_as_payload_invalid(
    sns_world: SnsWorld,
) -> None:
    recorder = Recorder()
    _, binding, handler = setup(sns_world, recorder)
    bad = Message(
        id="bad-payload",
        topic="jobs",
        payload={"n": "x"},
        attributes={},
        published_at=NOW,
        sequence=None,
    )
    sns_world.sqs.send_message(
        QueueUrl=binding.queue_url, MessageBody=create_sns_message_body(bad, environment="test")
    )
    failed, _ = lambda_like(sns_world, binding, handler, expected=1)
    assert failed == [] and recorder.calls == []
    copy = dead_letters(sns_world, binding, 1)["bad-payload"]
    assert copy["runlane_dead_letter_reason"] == "payload_invalid"


def test_no_record_is_acknowledged_without_a_durable_dead_letter(sns_world: SnsWorld) -> None:
    recorder = Recorder()
    arn, binding, _ = setup(sns_world, recorder)
    gone = binding.dead_letter_queue_url.rsplit("/", 1)[0] + "/runlane-no-such-queue"
    broken = sns_subscription(
        binding.subscription, queue_url=binding.queue_url, dead_letter_queue_url=gone
    )
    handler = create_sns_lambda_handler(subscription=broken, client=sns_world.sqs)
    publish(sns_world, arn, job("dead", "dead"), job("ok", "complete"))
    failed, ids = lambda_like(sns_world, binding, handler, expected=2)
    assert [ids[f] for f in failed] == ["dead"]


def test_on_fifo_a_record_not_acknowledged_holds_the_later_records_of_its_group(
    sns_world: SnsWorld,
) -> None:
    recorder = Recorder()
    arn, binding, handler = setup(sns_world, recorder, fifo=True, mode="exclusive", key="customer")
    publish(
        sns_world,
        arn,
        job("a1", "retry-later", customer="a"),
        job("a2", "complete", customer="a"),
        job("b1", "complete", customer="b"),
        job("a3", "complete", customer="a"),
        group="customer",
    )
    failed, ids = lambda_like(sns_world, binding, handler, expected=4)
    assert sorted(ids[f] for f in failed) == ["a1", "a2", "a3"]
    assert recorder.ran() == ["a1", "b1"]  # a2 and a3 were released unrun
    # a1 waits 30 s for its retry and holds its group: a2 and a3 stay behind it.
    assert sns_world.receive(binding.queue_url, wait=1) == []


def test_records_not_started_before_the_deadline_margin_are_released(sns_world: SnsWorld) -> None:
    class NearlyOut:
        def get_remaining_time_in_millis(self) -> int:
            return 1_000

    recorder = Recorder()
    arn, binding, handler = setup(sns_world, recorder)
    publish(sns_world, arn, job("x1", "complete"), job("x2", "complete"))
    failed, _ = lambda_like(sns_world, binding, handler, expected=2, context=NearlyOut())
    assert len(failed) == 2 and recorder.calls == []
    back = sns_world.receive(binding.queue_url, wait=0)  # released with visibility 0
    assert len(back) == 2


def test_the_signal_is_set_before_the_lambda_deadline(sns_world: SnsWorld) -> None:
    class Invocation:
        """A Lambda context whose deadline is 3 s away: the margin (2 s) comes after 1 s."""

        def __init__(self) -> None:
            self.deadline = time.monotonic() + 3

        def get_remaining_time_in_millis(self) -> int:
            return int((self.deadline - time.monotonic()) * 1000)

    recorder = Recorder()
    arn, binding, handler = setup(sns_world, recorder)
    publish(sns_world, arn, job("waits", "wait-for-signal"))
    messages = sns_world.receive_all(binding.queue_url, expected=1)
    started = time.monotonic()
    response = handler(sns_world.event(binding.queue_url, messages), Invocation())
    assert 0.8 < time.monotonic() - started < 2.5
    assert len(response["batchItemFailures"]) == 1
    (_, ctx) = recorder.calls[0]
    assert ctx.signal.reason is not None and ctx.signal.reason.value == "timeout"


def test_a_handler_past_its_timeout_is_signalled_and_retried(sns_world: SnsWorld) -> None:
    recorder = Recorder()
    arn, binding, handler = setup(sns_world, recorder, timeout="0.3s")
    publish(sns_world, arn, job("slow", "slow"))
    started = time.monotonic()
    failed, _ = lambda_like(sns_world, binding, handler, expected=1)
    assert len(failed) == 1 and time.monotonic() - started < 4
    ((_, ctx),) = recorder.calls
    assert ctx.signal.reason is not None and ctx.signal.reason.value == "timeout"


def test_the_event_must_be_an_sqs_event_and_the_handler_built_right(sns_world: SnsWorld) -> None:
    recorder = Recorder()
    _, binding, handler = setup(sns_world, recorder)
    for event in ({}, {"Records": "x"}, {"Records": [{"body": "x"}]}, None):
        with pytest.raises(RunlaneError) as raised:
            handler(event, None)
        assert raised.value.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION
    for options in (
        {"subscription": binding.subscription, "client": sns_world.sqs},
        {"subscription": binding, "client": sns_world.sns},
        {"subscription": binding, "client": sns_world.sqs, "worker_id": ""},
    ):
        with pytest.raises(RunlaneError) as raised:
            create_sns_lambda_handler(**options)
        assert raised.value.code is ErrorCode.CONFIGURATION_INVALID

    async def inside_a_loop() -> None:
        handler({"Records": []}, None)

    with pytest.raises(RunlaneError):
        asyncio.run(inside_a_loop())


# -- a real function behind a real event source mapping ----------------------------------

HANDLER_SOURCE = """
import os

from runlane import RetryPolicy
from runlane.sns import create_sns_lambda_handler, sns_subscription
from runlane.topics.definitions import subscription, topic
from runlane.topics.outcomes import Outcome

import boto3


def work(message, ctx):
    if message.payload["do"] == "dead":
        return Outcome.dead_letter("refused by the test")
    with open(os.environ["RESULTS_PATH"], "a") as results:
        results.write(message.id + "\\n")


jobs = topic("jobs")
binding = sns_subscription(
    subscription("jobs.work", topic=jobs, handler=work, filter={"kind": ["a"]},
                 retry=RetryPolicy(max_attempts=2)),
    queue_url=os.environ["QUEUE_URL"],
    dead_letter_queue_url=os.environ["DLQ_URL"],
)
sqs = boto3.client("sqs", endpoint_url=os.environ["SQS_ENDPOINT"], region_name="us-east-1",
                   aws_access_key_id="test", aws_secret_access_key="test")
handler = create_sns_lambda_handler(subscription=binding, client=sqs)
"""


def test_a_lambda_event_source_mapping_runs_the_subscription(
    sns_world: SnsWorld, lambda_client: Any, ministack_endpoint: str, tmp_path: Path
) -> None:
    recorder = Recorder()
    arn = sns_world.topic()
    binding = sns_world.subscribe(
        arn, jobs_subscription(recorder, filter={"kind": ["a"]}), visibility_timeout=5
    )
    results = tmp_path / "results.txt"
    results.touch()
    name = f"runlane-sns-{uuid.uuid4().hex[:10]}"
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("handler.py", textwrap.dedent(HANDLER_SOURCE))
    lambda_client.create_function(
        FunctionName=name,
        Runtime="python3.11",
        Role="arn:aws:iam::000000000000:role/runlane-lambda",
        Handler="handler.handler",
        Code={"ZipFile": archive.getvalue()},
        Timeout=30,
        Environment={
            "Variables": {
                "RESULTS_PATH": str(results),
                "QUEUE_URL": binding.queue_url,
                "DLQ_URL": binding.dead_letter_queue_url,
                "SQS_ENDPOINT": ministack_endpoint,
            }
        },
    )
    mapping = lambda_client.create_event_source_mapping(
        FunctionName=name,
        EventSourceArn=sns_world.queue_arn(binding.queue_url),
        BatchSize=10,
        FunctionResponseTypes=["ReportBatchItemFailures"],
    )
    try:
        publish(
            sns_world,
            arn,
            job("good-1", "complete", kind="a"),
            job("filtered", "complete", kind="b"),
            job("dead-1", "dead", kind="a"),
            job("good-2", "complete", kind="a"),
        )
        deadline = time.monotonic() + 30
        while sorted(results.read_text().split()) != ["good-1", "good-2"]:
            assert time.monotonic() < deadline, "the function did not run every matching message"
            time.sleep(0.2)
        copies = dead_letters(sns_world, binding, 1)
        assert copies["dead-1"]["runlane_dead_letter_reason"] == "refused by the test"
        assert sorted(results.read_text().split()) == ["good-1", "good-2"]
    finally:
        lambda_client.delete_event_source_mapping(UUID=mapping["UUID"])
        lambda_client.delete_function(FunctionName=name)
