"""What a dead-letter copy carries (5.11.4 step 6), and reading copies back (5.11.5)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from runlane.sns import sns_subscription
from runlane.topics.definitions import subscription, topic
from runlane.transport.sns.dead_letters import (
    MAX_FAILURE_ATTRIBUTE,
    dead_letter_attributes,
    dead_letter_of,
    failure_attribute,
    read_attributes,
)
from runlane.types.runs import RunFailure

AT = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
BASE = "https://sqs.us-east-1.amazonaws.com/123456789012/"


def handle(message: object, ctx: object) -> None:
    return None


BINDING = sns_subscription(
    subscription("jobs.work", topic=topic("jobs"), handler=handle),
    queue_url=f"{BASE}jobs",
    dead_letter_queue_url=f"{BASE}jobs-dlq",
)


def strings(attributes: dict[str, dict[str, str]]) -> dict[str, str]:
    assert all(value["DataType"] == "String" for value in attributes.values())
    return {name: value["StringValue"] for name, value in attributes.items()}


def test_a_copy_carries_only_the_runlane_attributes_with_bounded_lengths() -> None:
    failure = RunFailure("task_failed", "boom", True, {"exception_type": "ValueError"})
    copy = strings(
        dead_letter_attributes(
            reason="r" * 800,
            failure=failure,
            attempt=3,
            subscription="jobs.work",
            dead_lettered_at=AT,
        )
    )
    assert set(copy) == {
        "runlane_dead_letter_reason",
        "runlane_failure",
        "runlane_attempt",
        "runlane_dead_lettered_at",
        "runlane_subscription",
    }
    assert len(copy["runlane_dead_letter_reason"]) == 500
    assert copy["runlane_dead_letter_reason"].endswith("…")
    assert json.loads(copy["runlane_failure"]) == failure.to_json()
    assert copy["runlane_attempt"] == "3" and copy["runlane_dead_lettered_at"] == AT.isoformat()
    again = strings(
        dead_letter_attributes(
            reason="x", failure=None, attempt=1, subscription="s", dead_lettered_at=AT, replays=2
        )
    )
    assert "runlane_failure" not in again and again["runlane_replays"] == "2"


def test_a_long_failure_is_cut_to_2000_characters_of_valid_json() -> None:
    for message in ("m" * 5000, '"\\' * 3000, "\n\t" * 2000, "é" * 4000):
        failure = RunFailure("task_failed", message, True, {"detail": "d" * 3000})
        text = failure_attribute(failure)
        assert len(text) <= MAX_FAILURE_ATTRIBUTE
        document = json.loads(text)
        assert document["code"] == "task_failed" and document["meta"] == {}
        assert document["message"].endswith("…")
    short = RunFailure("task_failed", "short", False, {"k": "v"})
    assert json.loads(failure_attribute(short)) == short.to_json()


def test_attributes_are_read_in_the_apis_and_lambdas_spelling() -> None:
    assert read_attributes(
        {"a": {"StringValue": "1", "DataType": "String"}, "b": {"stringValue": "2"}, "c": {}}
    ) == {"a": "1", "b": "2"}
    assert read_attributes(None) == {}


def test_reading_a_copy_never_raises_on_bad_content() -> None:
    letter = dead_letter_of(
        BINDING,
        {
            "MessageId": "abc",
            "Body": "{not json",
            "Attributes": {"SentTimestamp": "1780304400000"},
            "MessageAttributes": {
                "runlane_dead_letter_reason": {"StringValue": "invalid_envelope"},
                "runlane_attempt": {"StringValue": "many"},
                "runlane_failure": {"StringValue": "[1, 2"},
                "runlane_dead_lettered_at": {"StringValue": "later"},
            },
        },
    )
    assert letter.id == "sqs-abc" and letter.replayable is False
    assert (letter.reason, letter.attempt, letter.failure) == ("invalid_envelope", 0, None)
    assert letter.dead_lettered_at == datetime.fromtimestamp(1780304400, UTC)
    assert letter.message.payload == "{not json" and letter.topic == "jobs"
