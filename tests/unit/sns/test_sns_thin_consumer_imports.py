"""The thin consumer loads no database driver: checked in a fresh interpreter (5.11.4, 5.14)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    import runlane

    after_runlane = set(sys.modules)

    import boto3

    from runlane.sns import create_sns_lambda_handler, create_sns_message_body, sns_subscription
    from runlane.topics.definitions import subscription, topic
    from runlane.topics.messages import Message
    from datetime import datetime, timezone

    ran = []
    jobs = topic("jobs")
    binding = sns_subscription(
        subscription("jobs.work", topic=jobs, handler=lambda message, ctx: ran.append(message.id)),
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/jobs-work",
        dead_letter_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/jobs-work-dlq",
    )
    client = boto3.client(
        "sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    handler = create_sns_lambda_handler(subscription=binding, client=client)
    message = Message(
        id="m1", topic="jobs", payload={"n": 1}, attributes={},
        published_at=datetime.now(timezone.utc), sequence=None,
    )
    record = {
        "messageId": "sqs-1",
        "receiptHandle": "handle-1",
        "body": create_sns_message_body(message, environment="production"),
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
    }
    response = handler({"Records": [record]}, None)
    storage = sorted(m for m in sys.modules if m.startswith("runlane.storage"))
    DRIVERS = ("sqlite3", "_sqlite3", "psycopg", "psycopg_pool", "psycopg_binary")
    print(json.dumps({
        "response": response,
        "ran": ran,
        "drivers": sorted(
            m for m in sys.modules
            if m.split(".")[0] in DRIVERS
        ),
        "storage": storage,
        "storage_added_by_sns": sorted(set(storage) - after_runlane),
    }))
    """
)


def test_importing_runlane_sns_and_calling_the_handler_loads_no_database_driver() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["response"] == {"batchItemFailures": []}
    assert report["ran"] == ["m1"]  # the handler really ran in that interpreter
    assert report["drivers"] == []
    # No storage driver, and nothing of storage beyond what `import runlane` itself loads
    # (the storage protocol the runtime class is typed against).
    assert report["storage_added_by_sns"] == []
    assert not any(
        name.startswith(
            ("runlane.storage.sqlite", "runlane.storage.postgres", "runlane.storage.sql")
        )
        for name in report["storage"]
    )
    assert set(report["storage"]) <= {"runlane.storage", "runlane.ports.storage"}
