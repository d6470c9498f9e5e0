"""The SQS transport publishing wakeups to a real SQS server (Ministack) with real boto3."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from runlane import ErrorCode, RunlaneError, queue
from runlane.ports.transport import DeliveryMessage, WakeupAttempt, WakeupFailed, WakeupPublished
from runlane.sqs import (
    SqsFifo,
    SqsFifoDeduplication,
    SqsFifoMessageGroup,
    parse_sqs_wakeup_body,
    sqs_queue,
    sqs_transport,
)
from runlane.transport.sqs.transport import provider_safe_id

pytest_plugins = ["tests.support.ministack"]

MAIN = queue("main", default=True)
EMAILS = queue("emails")
QueueFactory = Callable[..., str]


def wakeup(
    on: Any = MAIN,
    *,
    run_id: str | None = None,
    outbox_id: str | None = None,
    trace_carrier: dict[str, str] | None = None,
) -> WakeupAttempt:
    return WakeupAttempt(
        DeliveryMessage(
            environment="test",
            run_id=run_id or f"run-{uuid.uuid4().hex[:12]}",
            queue=on.name,
            trace_carrier=trace_carrier,
        ),
        outbox_id=outbox_id or f"outbox-{uuid.uuid4().hex[:12]}",
    )


def receive_all(client: Any, url: str) -> list[dict[str, Any]]:
    """Every visible message of the queue, with all system attributes, deleted as read."""
    received: list[dict[str, Any]] = []
    while True:
        messages = client.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return received
        received.extend(messages)
        client.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )


class RecordingClient:
    """The real boto3 client, recording every call; ``answer`` may replace one operation."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.answer: dict[str, Callable[..., Any]] = {}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if not callable(method):
            return method

        def call(**params: Any) -> Any:
            self.calls.append((name, params))
            if name in self.answer:
                return self.answer[name](method, **params)
            return method(**params)

        return call

    def count(self, operation: str) -> int:
        return sum(1 for name, _ in self.calls if name == operation)


async def test_a_standard_queue_gets_one_v1_envelope_per_wakeup(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("standard")
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])
    attempts = [wakeup(trace_carrier={"traceparent": "00-abc-def-01"}), wakeup()]
    outcomes = await transport.publish_wakeups(attempts)
    received = {m["MessageId"]: m for m in receive_all(sqs_client, url)}
    assert len(received) == 2
    for attempt, outcome in zip(attempts, outcomes, strict=True):
        assert isinstance(outcome, WakeupPublished)
        body = received[outcome.provider_message_id]["Body"]
        assert parse_sqs_wakeup_body(body) == attempt.message
        envelope = json.loads(body)
        assert envelope["type"] == "runlane.wakeup" and envelope["version"] == 1
        assert set(envelope["message"]) <= {
            "environment",
            "run_id",
            "queue",
            "requested_at",
            "trace_carrier",
        }


async def test_fifo_wakeups_are_grouped_per_run_and_deduplicated_by_outbox_id(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("per-run", fifo=True)
    transport = sqs_transport(
        client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url, fifo=SqsFifo())]
    )
    attempts = [wakeup(run_id="run-a", outbox_id="o-1"), wakeup(run_id="run-b", outbox_id="o-2")]
    await transport.publish_wakeups(attempts)
    seen = {
        (m["Attributes"]["MessageGroupId"], m["Attributes"]["MessageDeduplicationId"])
        for m in receive_all(sqs_client, url)
    }
    assert seen == {("run-a", "o-1"), ("run-b", "o-2")}


async def test_fifo_queue_grouping_uses_the_queue_name(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("per-queue", fifo=True)
    fifo = SqsFifo(message_group=SqsFifoMessageGroup.QUEUE)
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url, fifo=fifo)])
    attempts = [wakeup() for _ in range(12)]
    await transport.publish_wakeups(attempts)
    received = receive_all(sqs_client, url)
    assert {m["Attributes"]["MessageGroupId"] for m in received} == {"main"}
    assert [parse_sqs_wakeup_body(m["Body"]).run_id for m in received] == [
        a.message.run_id for a in attempts
    ]


async def test_content_based_deduplication_sends_no_deduplication_id(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("content", fifo=True, ContentBasedDeduplication="true")
    fifo = SqsFifo(deduplication=SqsFifoDeduplication.CONTENT_BASED)
    recording = RecordingClient(sqs_client)
    transport = sqs_transport(client=recording, queues=[sqs_queue(MAIN, queue_url=url, fifo=fifo)])
    outcomes = await transport.publish_wakeups([wakeup(outbox_id="o-content")])
    assert isinstance(outcomes[0], WakeupPublished)
    (_, params), *_ = [c for c in recording.calls if c[0] == "send_message_batch"]
    assert "MessageDeduplicationId" not in params["Entries"][0]
    (message,) = receive_all(sqs_client, url)
    assert message["Attributes"]["MessageDeduplicationId"] != "o-content"


async def test_a_republished_fifo_wakeup_is_accepted_and_delivered_once(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("dedup", fifo=True)
    transport = sqs_transport(
        client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url, fifo=SqsFifo())]
    )
    attempt = wakeup()
    first = await transport.publish_wakeups([attempt])
    again = await transport.publish_wakeups([attempt])
    assert isinstance(first[0], WakeupPublished) and isinstance(again[0], WakeupPublished)
    assert len(receive_all(sqs_client, url)) == 1


async def test_ids_sqs_would_refuse_are_hashed_into_safe_ones(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    unsafe = "outbox with spaces and ünïcode"
    assert provider_safe_id("0190f3c2-7a1b") == "0190f3c2-7a1b"
    assert provider_safe_id(unsafe) == provider_safe_id(unsafe) != unsafe
    assert len(provider_safe_id("x" * 200)) == 64
    url = sqs_queue_factory("hashed", fifo=True)
    transport = sqs_transport(
        client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url, fifo=SqsFifo())]
    )
    outcomes = await transport.publish_wakeups([wakeup(run_id="run ü", outbox_id=unsafe)])
    assert isinstance(outcomes[0], WakeupPublished)
    (message,) = receive_all(sqs_client, url)
    assert message["Attributes"]["MessageDeduplicationId"] == provider_safe_id(unsafe)
    assert message["Attributes"]["MessageGroupId"] == provider_safe_id("run ü")


async def test_a_queue_name_is_resolved_once_and_cached(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("by-name")
    name = url.rsplit("/", 1)[-1]
    recording = RecordingClient(sqs_client)
    binding = sqs_queue(MAIN, queue_name=name, queue_owner_aws_account_id="000000000000")
    transport = sqs_transport(client=recording, queues=[binding])
    await asyncio.gather(*(transport.publish_wakeups([wakeup()]) for _ in range(5)))
    await transport.publish_wakeups([wakeup()])
    assert recording.count("get_queue_url") == 1
    lookup = next(params for op, params in recording.calls if op == "get_queue_url")
    assert lookup == {"QueueName": name, "QueueOwnerAWSAccountId": "000000000000"}
    assert await transport.queue_url(MAIN) == url
    assert len(receive_all(sqs_client, url)) == 6


async def test_an_unresolvable_queue_name_is_a_configuration_error(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("resolvable")
    recording = RecordingClient(sqs_client)
    transport = sqs_transport(
        client=recording,
        queues=[
            sqs_queue(MAIN, queue_url=url),
            sqs_queue(EMAILS, queue_name=f"missing-{uuid.uuid4().hex[:8]}"),
        ],
    )
    with pytest.raises(RunlaneError) as raised:
        await transport.publish_wakeups([wakeup(MAIN), wakeup(EMAILS)])
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert raised.value.meta["provider_code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert "does not exist" not in raised.value.message
    assert recording.count("send_message_batch") == 0
    assert receive_all(sqs_client, url) == []


@pytest.mark.parametrize(
    ("batch_size", "chunks"), [(10, [10, 10, 5]), (4, [4] * 6 + [1]), (50, [10, 10, 5])]
)
async def test_large_publishes_are_split_into_batches_of_at_most_ten(
    sqs_client: Any, sqs_queue_factory: QueueFactory, batch_size: int, chunks: list[int]
) -> None:
    url = sqs_queue_factory("chunks")
    recording = RecordingClient(sqs_client)
    transport = sqs_transport(
        client=recording, queues=[sqs_queue(MAIN, queue_url=url)], batch_size=batch_size
    )
    attempts = [wakeup() for _ in range(25)]
    outcomes = await transport.publish_wakeups(attempts)
    sizes = [len(p["Entries"]) for op, p in recording.calls if op == "send_message_batch"]
    assert sorted(sizes, reverse=True) == chunks
    assert all(isinstance(o, WakeupPublished) for o in outcomes)
    received = {
        m["MessageId"]: parse_sqs_wakeup_body(m["Body"]) for m in receive_all(sqs_client, url)
    }
    assert [
        received[o.provider_message_id].run_id for o in outcomes if isinstance(o, WakeupPublished)
    ] == [a.message.run_id for a in attempts]


async def test_queues_sharing_one_sqs_queue_are_sent_in_one_batch(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("shared")
    recording = RecordingClient(sqs_client)
    transport = sqs_transport(
        client=recording, queues=[sqs_queue(MAIN, queue_url=url), sqs_queue(EMAILS, queue_url=url)]
    )
    await transport.publish_wakeups([wakeup(MAIN), wakeup(EMAILS), wakeup(MAIN)])
    assert recording.count("send_message_batch") == 1
    assert sorted(parse_sqs_wakeup_body(m["Body"]).queue for m in receive_all(sqs_client, url)) == [
        "emails",
        "main",
        "main",
    ]


async def test_a_mixed_batch_response_keeps_outcomes_aligned_with_attempts(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("small", MaximumMessageSize="1024")
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])
    oversized = {"baggage": "x" * 2_000}
    attempts = [
        wakeup(),
        wakeup(trace_carrier=oversized),
        wakeup(),
        wakeup(trace_carrier=oversized),
    ]
    outcomes = await transport.publish_wakeups(attempts)
    assert [type(o) for o in outcomes] == [WakeupPublished, WakeupFailed] * 2
    received = {
        m["MessageId"]: parse_sqs_wakeup_body(m["Body"]) for m in receive_all(sqs_client, url)
    }
    for index in (0, 2):
        outcome = outcomes[index]
        assert isinstance(outcome, WakeupPublished)
        assert received[outcome.provider_message_id] == attempts[index].message
    failed = outcomes[1]
    assert isinstance(failed, WakeupFailed)
    assert failed.error.code == ErrorCode.TRANSPORT_PUBLISH_FAILED.value
    assert failed.error.retryable is False
    assert failed.error.meta["provider_code"] == "InvalidParameterValue"
    assert failed.error.meta["sender_fault"] is True
    assert failed.error.meta["queue_url"] == url and failed.error.meta["request_id"]
    assert "shorter than" not in failed.error.message
    assert attempts[1].message.run_id in failed.error.message


async def test_content_based_deduplication_on_a_queue_without_it_fails_per_entry(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("no-content-dedup", fifo=True)
    fifo = SqsFifo(deduplication=SqsFifoDeduplication.CONTENT_BASED)
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url, fifo=fifo)])
    outcomes = await transport.publish_wakeups([wakeup(), wakeup()])
    assert all(isinstance(o, WakeupFailed) for o in outcomes)
    assert receive_all(sqs_client, url) == []


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda r: {**r, "Successful": r["Successful"][1:]}, id="omitted"),
        pytest.param(
            lambda r: {**r, "Successful": [*r["Successful"], r["Successful"][0]]}, id="duplicate"
        ),
        pytest.param(
            lambda r: {**r, "Successful": [*r["Successful"], {"Id": "99", "MessageId": "x"}]},
            id="unknown",
        ),
    ],
)
async def test_answers_that_do_not_match_the_request_are_contract_violations(
    sqs_client: Any, sqs_queue_factory: QueueFactory, tamper: Callable[[dict[str, Any]], Any]
) -> None:
    url = sqs_queue_factory("tampered")
    recording = RecordingClient(sqs_client)
    recording.answer["send_message_batch"] = lambda method, **params: tamper(method(**params))
    transport = sqs_transport(client=recording, queues=[sqs_queue(MAIN, queue_url=url)])
    with pytest.raises(RunlaneError) as raised:
        await transport.publish_wakeups([wakeup(), wakeup(), wakeup()])
    assert raised.value.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION


async def test_an_unreachable_server_is_transport_unavailable() -> None:
    client = boto3.client(
        "sqs",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    url = "http://127.0.0.1:9/000000000000/main"
    transport = sqs_transport(client=client, queues=[sqs_queue(MAIN, queue_url=url)])
    with pytest.raises(RunlaneError) as raised:
        await transport.publish_wakeups([wakeup()])
    assert raised.value.code is ErrorCode.TRANSPORT_UNAVAILABLE
    assert raised.value.retryable is True
    assert raised.value.meta["error_type"] == "EndpointConnectionError"


async def test_a_request_refused_for_one_entry_is_split_until_that_entry_fails_alone(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("poison")
    recording = RecordingClient(sqs_client)
    transport = sqs_transport(client=recording, queues=[sqs_queue(MAIN, queue_url=url)])
    poison = wakeup(trace_carrier={"baggage": "x" * 1_100_000})
    good = [wakeup() for _ in range(9)]
    outcomes = await transport.publish_wakeups([*good[:4], poison, *good[4:]])
    failed = outcomes[4]
    assert isinstance(failed, WakeupFailed) and failed.error.retryable is False
    assert failed.error.code == ErrorCode.TRANSPORT_PUBLISH_FAILED.value
    assert failed.error.meta["provider_code"].endswith("BatchRequestTooLong")
    assert all(isinstance(o, WakeupPublished) for i, o in enumerate(outcomes) if i != 4)
    received = [parse_sqs_wakeup_body(m["Body"]).run_id for m in receive_all(sqs_client, url)]
    assert sorted(received) == sorted(a.message.run_id for a in good)
    # Halving: 10, then 5 + 5, then the poison's half down to one entry (at most 2n - 1).
    assert recording.count("send_message_batch") <= 2 * 10 - 1


async def test_a_chunk_that_fails_as_a_whole_fails_only_its_own_wakeups(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    live = sqs_queue_factory("live")
    gone = sqs_queue_factory("gone")
    sqs_client.delete_queue(QueueUrl=gone)
    recording = RecordingClient(sqs_client)
    transport = sqs_transport(
        client=recording,
        queues=[sqs_queue(MAIN, queue_url=live), sqs_queue(EMAILS, queue_url=gone)],
    )
    attempts = [wakeup(MAIN if i % 2 else EMAILS) for i in range(24)]
    outcomes = await transport.publish_wakeups(attempts)
    for attempt, outcome in zip(attempts, outcomes, strict=True):
        if attempt.message.queue == MAIN.name:
            assert isinstance(outcome, WakeupPublished)
        else:
            assert isinstance(outcome, WakeupFailed) and outcome.error.retryable is False
            assert outcome.error.meta["queue_url"] == gone
    received = [parse_sqs_wakeup_body(m["Body"]).run_id for m in receive_all(sqs_client, live)]
    assert sorted(received) == sorted(a.message.run_id for a in attempts[1::2])
    # A missing queue is no entry's fault: its chunks are not split.
    assert recording.count("send_message_batch") == 4


async def test_a_missing_queue_is_a_permanent_publish_failure(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("deleted")
    sqs_client.delete_queue(QueueUrl=url)
    transport = sqs_transport(client=sqs_client, queues=[sqs_queue(MAIN, queue_url=url)])
    with pytest.raises(RunlaneError) as raised:
        await transport.publish_wakeups([wakeup()])
    assert raised.value.code is ErrorCode.TRANSPORT_PUBLISH_FAILED
    assert raised.value.retryable is False
    assert raised.value.meta["provider_code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert raised.value.meta["queue_url"] == url
    assert "does not exist" not in raised.value.message


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ThrottlingException", 400),
        ("RequestThrottled", 403),
        ("InternalFailure", 500),
        ("Unknown", 503),
    ],
)
async def test_throttling_and_server_errors_are_transport_unavailable(
    sqs_client: Any, sqs_queue_factory: QueueFactory, code: str, status: int
) -> None:
    url = sqs_queue_factory("throttled")
    recording = RecordingClient(sqs_client)

    def refuse(method: Any, **params: Any) -> Any:
        raise ClientError(
            {
                "Error": {"Code": code, "Message": "secret provider text", "Type": "Sender"},
                "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": "req-1"},
            },
            "SendMessageBatch",
        )

    recording.answer["send_message_batch"] = refuse
    transport = sqs_transport(client=recording, queues=[sqs_queue(MAIN, queue_url=url)])
    with pytest.raises(RunlaneError) as raised:
        await transport.publish_wakeups([wakeup()])
    assert raised.value.code is ErrorCode.TRANSPORT_UNAVAILABLE and raised.value.retryable
    assert raised.value.meta["request_id"] == "req-1"
    assert "secret provider text" not in raised.value.message


async def test_a_wakeup_for_an_unbound_queue_is_refused_before_anything_is_sent(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("bound")
    recording = RecordingClient(sqs_client)
    transport = sqs_transport(client=recording, queues=[sqs_queue(MAIN, queue_url=url)])
    with pytest.raises(RunlaneError) as raised:
        await transport.publish_wakeups([wakeup(MAIN), wakeup(EMAILS)])
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert recording.calls == []


def _throttled_once(recording: RecordingClient) -> None:
    """The first SendMessageBatch is throttled; later ones go to the server."""
    refused: list[int] = []

    def answer(method: Any, **params: Any) -> Any:
        if not refused:
            refused.append(len(params["Entries"]))
            raise ClientError(
                {
                    "Error": {"Code": "ThrottlingException", "Message": "slow down"},
                    "ResponseMetadata": {"HTTPStatusCode": 400, "RequestId": "req-2"},
                },
                "SendMessageBatch",
            )
        return method(**params)

    recording.answer["send_message_batch"] = answer


async def test_a_throttled_chunk_fails_its_wakeups_and_the_other_chunks_stay_published(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("throttled")
    recording = RecordingClient(sqs_client)
    _throttled_once(recording)
    transport = sqs_transport(client=recording, queues=[sqs_queue(MAIN, queue_url=url)])
    attempts = [wakeup() for _ in range(23)]
    outcomes = await transport.publish_wakeups(attempts)
    failed = [a for a, o in zip(attempts, outcomes, strict=True) if isinstance(o, WakeupFailed)]
    assert len(failed) == 10  # one whole chunk, not split: throttling is nobody's fault
    assert all(
        o.error.retryable and o.error.code == ErrorCode.TRANSPORT_UNAVAILABLE.value
        for o in outcomes
        if isinstance(o, WakeupFailed)
    )
    received = {parse_sqs_wakeup_body(m["Body"]).run_id for m in receive_all(sqs_client, url)}
    assert received == {a.message.run_id for a in attempts} - {a.message.run_id for a in failed}


async def test_a_throttled_fifo_chunk_holds_back_the_later_chunks_of_its_queue(
    sqs_client: Any, sqs_queue_factory: QueueFactory
) -> None:
    url = sqs_queue_factory("throttled", fifo=True)
    recording = RecordingClient(sqs_client)
    _throttled_once(recording)
    transport = sqs_transport(
        client=recording, queues=[sqs_queue(MAIN, queue_url=url, fifo=SqsFifo())]
    )
    with pytest.raises(RunlaneError) as raised:
        await transport.publish_wakeups([wakeup() for _ in range(23)])
    assert raised.value.code is ErrorCode.TRANSPORT_UNAVAILABLE and raised.value.retryable
    assert recording.count("send_message_batch") == 1
    assert receive_all(sqs_client, url) == []
