"""Contract 5.13 constants, and the message and context a handler receives (5.5)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runlane import RetryPolicy
from runlane.model.context import Context, Signal
from runlane.topics import constants
from runlane.topics.messages import DeliveryContext, Message
from runlane.topics.outcomes import DeadLetterReason, OutcomeKind
from runlane.types.errors import ErrorCode


def test_the_constants_have_the_contract_values() -> None:
    assert (
        RetryPolicy(max_attempts=5, initial_delay="10s", max_delay="15m")
        == constants.DEFAULT_SUBSCRIPTION_RETRY
    )
    assert (constants.DEFAULT_DEDUPLICATION_WINDOW, constants.MAX_DEDUPLICATION_WINDOW) == (
        "24h",
        "30d",
    )
    assert (constants.MAX_ATTRIBUTES, constants.MAX_ATTRIBUTE_VALUE_LENGTH) == (10, 256)
    assert (constants.MAX_FILTER_ATTRIBUTES, constants.MAX_FILTER_VALUES) == (5, 50)
    assert constants.MAX_KEY_LENGTH == 256
    assert (constants.MAX_DEAD_LETTER_REASON, constants.MAX_OPERATOR_REASON) == (500, 1000)
    assert (constants.MAX_ENVELOPE_BYTES, constants.SQS_MAX_VISIBILITY_S) == (262_144, 43_200)
    assert (constants.RECEIVE_GUARD_EXTRA_ATTEMPTS, constants.DLQ_SCAN_LIMIT) == (2, 100)


def test_the_error_codes_of_topics_exist() -> None:
    assert {
        ErrorCode.TOPIC_NOT_FOUND.value,
        ErrorCode.SUBSCRIPTION_NOT_FOUND.value,
        ErrorCode.DEAD_LETTER_NOT_FOUND.value,
        ErrorCode.MESSAGE_ID_CONFLICT.value,
    } == {
        "topic_not_found",
        "subscription_not_found",
        "dead_letter_not_found",
        "message_id_conflict",
    }


def test_outcome_kinds_and_built_in_reasons_have_the_contract_values() -> None:
    assert [k.value for k in OutcomeKind] == ["complete", "retry", "dead_letter"]
    assert {r.value for r in DeadLetterReason} == {
        "max_attempts_exceeded",
        "lease_expired",
        "payload_invalid",
        "fatal_work_error",
        "invalid_envelope",
        "redrive_policy",
    }


async def _no_heartbeat() -> None:
    return None


def test_a_delivery_context_is_a_context_whose_task_id_is_the_subscription() -> None:
    ctx = DeliveryContext(
        run_id="run-1",
        subscription="orders.email",
        queue="main",
        attempt=3,
        signal=Signal(),
        trace_carrier=None,
        heartbeat=_no_heartbeat,
        worker_id="w-1",
        topic="orders",
        message_id="m-1",
        key="c-1",
        is_replay=True,
        max_attempts=5,
    )

    assert isinstance(ctx, Context)
    assert ctx.task_id == ctx.subscription == "orders.email"
    assert (ctx.topic, ctx.message_id, ctx.key, ctx.is_replay, ctx.max_attempts) == (
        "orders",
        "m-1",
        "c-1",
        True,
        5,
    )
    assert ctx.release("30s").delay == 30.0
    assert "orders.email" in repr(ctx)


def test_a_message_is_frozen_and_generic_over_its_payload() -> None:
    message: Message[dict[str, str]] = Message(
        id="m-1",
        topic="orders",
        payload={"order": "o-1"},
        attributes={"event": "paid"},
        published_at=datetime(2030, 1, 1, tzinfo=UTC),
        sequence=7,
    )
    assert message.payload["order"] == "o-1"
    with pytest.raises(AttributeError):
        message.id = "m-2"  # type: ignore[misc]
