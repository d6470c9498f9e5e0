"""SQS bindings and transport options are checked eagerly, where the bad value enters.

These tests need no server: building a binding or a transport never calls SQS.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from runlane import ErrorCode, RunlaneError, queue
from runlane.sqs import SqsFifo, SqsFifoDeduplication, SqsFifoMessageGroup, sqs_queue, sqs_transport

MAIN = queue("main", default=True)
EMAILS = queue("emails")


@pytest.fixture(scope="module")
def offline_client() -> Any:
    """A real boto3 SQS client that is never called."""
    return boto3.client(
        "sqs", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )


def test_a_binding_needs_exactly_one_of_queue_url_or_queue_name() -> None:
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/main"
    both: dict[str, Any] = {"queue_url": url, "queue_name": "main"}
    for options in ({}, both):
        with pytest.raises(RunlaneError) as raised:
            sqs_queue(MAIN, **options)
        assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert sqs_queue(MAIN, queue_url=url).queue_url == url
    assert sqs_queue(MAIN, queue_name="main").queue_name == "main"


@pytest.mark.parametrize(
    "options",
    [
        {"queue_url": "not a url"},
        {"queue_url": "ftp://host/123/main"},
        {"queue_url": "https://sqs.us-east-1.amazonaws.com/"},
        {"queue_name": "has space"},
        {"queue_name": "x" * 81},
        {"queue_name": ""},
        {"queue_name": "main", "queue_owner_aws_account_id": "12345"},
        {
            "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/main",
            "queue_owner_aws_account_id": "123456789012",
        },
    ],
)
def test_malformed_urls_names_and_owner_accounts_are_rejected(options: dict[str, Any]) -> None:
    with pytest.raises(RunlaneError) as raised:
        sqs_queue(MAIN, **options)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_owner_account_goes_with_a_queue_name() -> None:
    binding = sqs_queue(MAIN, queue_name="main", queue_owner_aws_account_id="123456789012")
    assert binding.queue_owner_aws_account_id == "123456789012"


@pytest.mark.parametrize(
    "options",
    [
        {"queue_name": "orders.fifo"},
        {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo"},
        {"queue_name": "orders", "fifo": SqsFifo()},
        {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/orders", "fifo": SqsFifo()},
    ],
)
def test_fifo_options_and_the_fifo_suffix_must_agree(options: dict[str, Any]) -> None:
    with pytest.raises(RunlaneError) as raised:
        sqs_queue(MAIN, **options)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_fifo_options_are_enums_with_per_run_outbox_defaults() -> None:
    assert SqsFifo() == SqsFifo(SqsFifoMessageGroup.RUN, SqsFifoDeduplication.OUTBOX)
    with pytest.raises(RunlaneError) as raised:
        SqsFifo(message_group="run")  # type: ignore[arg-type]
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    with pytest.raises(RunlaneError):
        sqs_queue("main", queue_name="main")  # type: ignore[arg-type]


def test_the_transport_rejects_duplicate_bindings_and_policy_drift(offline_client: Any) -> None:
    with pytest.raises(RunlaneError) as duplicate:
        sqs_transport(
            client=offline_client,
            queues=[sqs_queue(MAIN, queue_name="a"), sqs_queue(MAIN, queue_name="b")],
        )
    assert duplicate.value.code is ErrorCode.CONFIGURATION_INVALID
    drifted = queue("main", concurrency_limit=2)
    with pytest.raises(RunlaneError) as drift:
        sqs_transport(
            client=offline_client,
            queues=[sqs_queue(MAIN, queue_name="a"), sqs_queue(drifted, queue_name="b")],
        )
    assert drift.value.code is ErrorCode.QUEUE_POLICY_DRIFT


@pytest.mark.parametrize(
    "options",
    [
        {"client": object()},
        {"queues": []},
        {"queues": "main"},
        {"queues": [MAIN]},
        {"batch_size": 0},
        {"batch_size": True},
        {"batch_size": "10"},
        {"name": ""},
    ],
)
def test_the_transport_validates_its_options(offline_client: Any, options: dict[str, Any]) -> None:
    arguments: dict[str, Any] = {
        "client": offline_client,
        "queues": [sqs_queue(MAIN, queue_name="m")],
    }
    with pytest.raises(RunlaneError) as raised:
        sqs_transport(**{**arguments, **options})
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_capabilities_promise_grouping_and_order_only_when_every_queue_is_fifo(
    offline_client: Any,
) -> None:
    fifo = sqs_queue(EMAILS, queue_name="emails.fifo", fifo=SqsFifo())
    mixed = sqs_transport(client=offline_client, queues=[sqs_queue(MAIN, queue_name="m"), fifo])
    only_fifo = sqs_transport(client=offline_client, queues=[fifo])
    for transport in (mixed, only_fifo):
        assert transport.capabilities.durable_delivery is True
        assert transport.capabilities.native_delay is False
    assert not mixed.capabilities.message_grouping and not mixed.capabilities.ordered_delivery
    assert only_fifo.capabilities.message_grouping and only_fifo.capabilities.ordered_delivery
    assert [q.name for q in mixed.queues] == ["main", "emails"]
