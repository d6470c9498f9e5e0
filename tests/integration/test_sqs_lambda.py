"""The SQS Lambda handler: partial batch responses, FIFO stops, deadlines, one warm loop.

Most tests hand the handler SQS events shaped exactly as Lambda delivers them;
the last ones deploy a Python function on Ministack behind a real event source
mapping with ``ReportBatchItemFailures``.
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
from pathlib import Path
from typing import Any

import pytest

from runlane import ErrorCode, RunlaneError, Signal, queue
from runlane.ports.transport import DeliveryMessage, WakeupAttempt
from runlane.sqs import (
    SqsDeliveryFailure,
    SqsDeliveryFailurePhase,
    create_sqs_lambda_handler,
    create_sqs_wakeup_body,
    sqs_queue,
    sqs_transport,
)
from runlane.transport.sqs.lambda_handler import LAMBDA_DEADLINE_MIN_MARGIN_MS

pytest_plugins = ["tests.support.ministack"]

MAIN = queue("main", default=True)


def record(run_id: str, *, body: Any = None, message_id: str | None = None) -> dict[str, Any]:
    """One SQS record as Lambda passes it to a handler."""
    if body is None:
        body = create_sqs_wakeup_body(DeliveryMessage("test", run_id, "main"))
    return {
        "messageId": message_id or f"msg-{run_id}",
        "receiptHandle": f"handle-{run_id}",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:main",
        "awsRegion": "us-east-1",
    }


def event(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}


def failed_ids(response: dict[str, Any]) -> list[str]:
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


class Executor:
    """An ``execute_delivery`` stand-in: records calls, refuses runs named ``bad-*``."""

    def __init__(self, on_call: Callable[[], None] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.on_call = on_call

    async def __call__(self, message: DeliveryMessage, **options: Any) -> str:
        self.calls.append((message.run_id, options))
        self.loops.append(asyncio.get_running_loop())
        if self.on_call is not None:
            self.on_call()
        await asyncio.sleep(0)
        if message.run_id.startswith("bad"):
            raise RuntimeError("the run could not be executed")
        return "executed"

    @property
    def run_ids(self) -> list[str]:
        return [run_id for run_id, _ in self.calls]


class LambdaContext:
    """The Lambda context: the test moves ``remaining_ms`` as deliveries "take time"."""

    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def test_a_standard_batch_reports_only_the_records_that_failed() -> None:
    execute = Executor()
    handler = create_sqs_lambda_handler(execute_delivery=execute)
    response = handler(event(record("a"), record("bad-b"), record("c"), record("bad-d")), None)
    assert failed_ids(response) == ["msg-bad-b", "msg-bad-d"]
    assert execute.run_ids == ["a", "bad-b", "c", "bad-d"]


def test_a_clean_batch_reports_no_failures() -> None:
    handler = create_sqs_lambda_handler(execute_delivery=Executor())
    assert handler(event(record("a"), record("b")), None) == {"batchItemFailures": []}


def test_a_fifo_batch_stops_at_its_first_failure_and_returns_every_later_record() -> None:
    execute = Executor()
    handler = create_sqs_lambda_handler(execute_delivery=execute, fifo=True)
    response = handler(event(record("a"), record("bad-b"), record("c"), record("d")), None)
    assert failed_ids(response) == ["msg-bad-b", "msg-c", "msg-d"]
    assert execute.run_ids == ["a", "bad-b"]


def test_failures_reach_the_observer_with_their_phase() -> None:
    seen: list[SqsDeliveryFailure] = []
    handler = create_sqs_lambda_handler(
        execute_delivery=Executor(), on_delivery_failure=seen.append
    )
    response = handler(
        event(record("bad-a"), record("x", body="not a wakeup"), record("y", body=42)), None
    )
    assert failed_ids(response) == ["msg-bad-a", "msg-x", "msg-y"]
    execute, parse, message = seen
    assert execute.phase is SqsDeliveryFailurePhase.EXECUTE
    assert execute.provider_message_id == "msg-bad-a"
    assert execute.delivery_message == DeliveryMessage("test", "bad-a", "main")
    assert isinstance(execute.cause, RuntimeError)
    assert parse.phase is SqsDeliveryFailurePhase.PARSE and parse.delivery_message is None
    assert isinstance(parse.cause, RunlaneError)
    assert parse.cause.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION
    assert message.phase is SqsDeliveryFailurePhase.MESSAGE


def test_an_async_observer_is_awaited() -> None:
    seen: list[SqsDeliveryFailurePhase] = []

    async def observe(failure: SqsDeliveryFailure) -> None:
        await asyncio.sleep(0)
        seen.append(failure.phase)

    handler = create_sqs_lambda_handler(execute_delivery=Executor(), on_delivery_failure=observe)
    handler(event(record("bad-a")), None)
    assert seen == [SqsDeliveryFailurePhase.EXECUTE]


def test_an_observer_that_raises_makes_the_handler_raise() -> None:
    def observe(failure: SqsDeliveryFailure) -> None:
        raise ValueError("observer broke")

    handler = create_sqs_lambda_handler(execute_delivery=Executor(), on_delivery_failure=observe)
    with pytest.raises(ValueError, match="observer broke"):
        handler(event(record("a"), record("bad-b")), None)


def test_a_record_without_a_message_id_fails_the_whole_batch() -> None:
    seen: list[SqsDeliveryFailure] = []
    execute = Executor()
    handler = create_sqs_lambda_handler(execute_delivery=execute, on_delivery_failure=seen.append)
    broken = record("b")
    del broken["messageId"]
    with pytest.raises(RunlaneError) as raised:
        handler(event(record("a"), broken), None)
    assert raised.value.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION
    assert [f.phase for f in seen] == [SqsDeliveryFailurePhase.MESSAGE]
    assert execute.calls == []


@pytest.mark.parametrize("bad_event", [{}, {"Records": "nope"}, [], None])
def test_an_event_without_records_is_refused(bad_event: Any) -> None:
    handler = create_sqs_lambda_handler(execute_delivery=Executor())
    with pytest.raises(RunlaneError) as raised:
        handler(bad_event, None)
    assert raised.value.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION


def test_records_not_started_before_the_deadline_margin_are_returned_for_redelivery() -> None:
    context = LambdaContext(remaining_ms=10_000)

    def spend_three_seconds() -> None:
        context.remaining_ms -= 3_000

    execute = Executor(on_call=spend_three_seconds)
    handler = create_sqs_lambda_handler(execute_delivery=execute)
    records = [record(name) for name in ("a", "b", "c", "d", "e")]
    response = handler(event(*records), context)
    # 10s → 7s → 4s → 1s: below the 2s floor, so d and e are never started.
    assert execute.run_ids == ["a", "b", "c"]
    assert failed_ids(response) == ["msg-d", "msg-e"]


def test_the_deadline_margin_is_a_tenth_of_a_long_invocation() -> None:
    context = LambdaContext(remaining_ms=60_000)

    def spend_twenty_seconds() -> None:
        context.remaining_ms -= 20_000

    execute = Executor(on_call=spend_twenty_seconds)
    handler = create_sqs_lambda_handler(execute_delivery=execute)
    response = handler(event(*(record(name) for name in "abcd")), context)
    # 60s → 40s → 20s → 0s; the margin is 6s (10% of 60s), so d is not started.
    assert execute.run_ids == ["a", "b", "c"]
    assert failed_ids(response) == ["msg-d"]


def test_no_record_starts_when_the_invocation_begins_inside_the_margin() -> None:
    execute = Executor()
    handler = create_sqs_lambda_handler(execute_delivery=execute, fifo=True)
    context = LambdaContext(remaining_ms=LAMBDA_DEADLINE_MIN_MARGIN_MS - 1)
    assert failed_ids(handler(event(record("a"), record("b")), context)) == ["msg-a", "msg-b"]
    assert execute.calls == []


def test_warm_invocations_reuse_one_event_loop_and_what_lives_on_it() -> None:
    class ModuleLevelRuntime:
        """Stands in for a runtime whose connection pool is bound to the loop it opened on."""

        def __init__(self) -> None:
            self.lock: asyncio.Lock | None = None
            self.loop: asyncio.AbstractEventLoop | None = None

        async def execute_delivery(self, message: DeliveryMessage, **options: Any) -> None:
            if self.loop is None:
                self.loop, self.lock = asyncio.get_running_loop(), asyncio.Lock()
            assert asyncio.get_running_loop() is self.loop, "a warm invocation changed loops"
            assert self.lock is not None
            async with self.lock:
                await asyncio.sleep(0)

    runtime = ModuleLevelRuntime()
    handler = create_sqs_lambda_handler(execute_delivery=runtime.execute_delivery)
    for invocation in range(3):
        assert handler(event(record(f"run-{invocation}")), None) == {"batchItemFailures": []}
    assert runtime.loop is not None and not runtime.loop.is_closed()


def test_delivery_options_are_passed_to_every_delivery() -> None:
    execute = Executor()
    signal = Signal()
    options = {"lease_duration": "2m", "worker_id": "lambda-1", "signal": signal}
    handler = create_sqs_lambda_handler(execute_delivery=execute, delivery_options=options)
    handler(event(record("a"), record("b")), None)
    assert [opts for _, opts in execute.calls] == [options, options]


async def test_the_handler_refuses_to_run_inside_a_running_event_loop() -> None:
    handler = create_sqs_lambda_handler(execute_delivery=Executor())
    with pytest.raises(RunlaneError) as raised:
        handler(event(record("a")), None)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


@pytest.mark.parametrize(
    "options",
    [
        {"execute_delivery": "not callable"},
        {"fifo": "yes"},
        {"on_delivery_failure": 3},
        {"delivery_options": {"visibility_timeout": 30}},
        {"delivery_options": {"lease_duration": "soon"}},
        {"delivery_options": {"signal": "stop"}},
        {"delivery_options": {"worker_id": ""}},
        {"delivery_options": ["lease_duration"]},
    ],
)
def test_handler_options_are_validated_when_it_is_created(options: dict[str, Any]) -> None:
    with pytest.raises(RunlaneError) as raised:
        create_sqs_lambda_handler(**{"execute_delivery": Executor(), **options})
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


# -- a real function behind a real event source mapping ----------------------------------

HANDLER_SOURCE = """
import os

from runlane.sqs import create_sqs_lambda_handler


async def execute_delivery(message, **options):
    if message.run_id.startswith("bad"):
        raise RuntimeError("refused")
    with open(os.environ["RESULTS_PATH"], "a") as results:
        results.write(message.run_id + "\\n")


handler = create_sqs_lambda_handler(execute_delivery=execute_delivery)
"""


def deploy_function(lambda_client: Any, source: str, environment: dict[str, str]) -> str:
    """Create a python3.11 function from one module, ``handler.handler``; return its name."""
    name = f"runlane-{uuid.uuid4().hex[:10]}"
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("handler.py", textwrap.dedent(source))
    lambda_client.create_function(
        FunctionName=name,
        Runtime="python3.11",
        Role="arn:aws:iam::000000000000:role/runlane-lambda",
        Handler="handler.handler",
        Code={"ZipFile": archive.getvalue()},
        Timeout=30,
        Environment={"Variables": environment},
    )
    return name


def queue_arn(sqs_client: Any, url: str) -> str:
    attributes = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


def wait_until(condition: Callable[[], bool], *, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def visible_bodies(sqs_client: Any, url: str) -> list[str]:
    response = sqs_client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    return [m["Body"] for m in response.get("Messages", [])]


def test_a_lambda_event_source_mapping_acknowledges_only_resolved_wakeups(
    sqs_client: Any, lambda_client: Any, sqs_queue_factory: Callable[..., str], tmp_path: Path
) -> None:
    dlq = sqs_queue_factory("lambda-dlq")
    redrive = json.dumps({"deadLetterTargetArn": queue_arn(sqs_client, dlq), "maxReceiveCount": 1})
    # The visibility timeout must outlast a cold invocation on a loaded machine: a good
    # wakeup still in flight when it expires is received again and, with
    # maxReceiveCount 1, redriven to the DLQ although the function handled it.
    source = sqs_queue_factory("lambda-src", VisibilityTimeout="10", RedrivePolicy=redrive)
    results = tmp_path / "results.txt"
    results.touch()
    function = deploy_function(lambda_client, HANDLER_SOURCE, {"RESULTS_PATH": str(results)})
    mapping = lambda_client.create_event_source_mapping(
        FunctionName=function,
        EventSourceArn=queue_arn(sqs_client, source),
        BatchSize=10,
        FunctionResponseTypes=["ReportBatchItemFailures"],
    )
    try:
        transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=source)])
        run_ids = ["good-1", "bad-1", "good-2", "good-3", "bad-2"]
        attempts = [
            WakeupAttempt(DeliveryMessage("test", run_id, "main"), f"outbox-{run_id}")
            for run_id in run_ids
        ]
        asyncio.run(transport.publish_wakeups(attempts))
        wait_until(
            lambda: sorted(results.read_text().split()) == ["good-1", "good-2", "good-3"],
            within=30,
            what="the function to execute every good wakeup",
        )
        dead: list[str] = []

        def both_refused_wakeups_are_dead() -> bool:
            dead.extend(visible_bodies(sqs_client, dlq))
            return len(dead) >= 2

        wait_until(
            both_refused_wakeups_are_dead, within=60, what="the refused wakeups to reach the DLQ"
        )
        assert sorted(json.loads(body)["message"]["run_id"] for body in dead) == ["bad-1", "bad-2"]
        assert sorted(results.read_text().split()) == ["good-1", "good-2", "good-3"]
    finally:
        lambda_client.delete_event_source_mapping(UUID=mapping["UUID"])
        lambda_client.delete_function(FunctionName=function)
