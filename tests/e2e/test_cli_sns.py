"""The ``runlane`` CLI on an SNS topic (Ministack): publish, dead letters by subscription,
and approximate subscription counts (5.10, 5.11)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.e2e.runner import Cli

from runlane import Outcome
from runlane.sns import create_sns_lambda_handler
from runlane.topics.definitions import subscription, topic

if TYPE_CHECKING:
    from tests.support.sns_world import SnsWorld

pytest_plugins = ["tests.support.ministack", "tests.support.sns_world"]

APP = "sns_app:rl"
SNS_APP = textwrap.dedent(
    """
    import os

    import boto3
    from runlane import Outcome, Runlane, queue, sqlite_lane, subscription, topic
    from runlane.sns import sns_subscription, sns_topic, sns_transport

    orders = topic("orders")


    @subscription("orders.email", topic=orders, filter={"event": ["paid"]})
    def email(message, ctx):
        return Outcome.dead_letter("no address") if message.payload == "dead" else None


    transport = sns_transport(
        client=boto3.client("sns"),
        sqs_client=boto3.client("sqs"),
        topics=[sns_topic(orders, topic_arn=os.environ["ORDERS_TOPIC_ARN"])],
        subscriptions=[
            sns_subscription(
                email,
                queue_url=os.environ["EMAIL_QUEUE_URL"],
                dead_letter_queue_url=os.environ["EMAIL_DLQ_URL"],
            )
        ],
    )
    rl = Runlane(
        lane=sqlite_lane("sns.db", topic_transport=transport),
        queues=[queue("main", default=True)],
        tasks=[],
        topics=[orders],
        subscriptions=[email],
    )
    """
)


def _email_handler(message: Any, ctx: Any) -> Outcome | None:
    return Outcome.dead_letter("no address") if message.payload == "dead" else None


# The app's subscription again, for the consumer the test runs as Lambda would.
EMAIL = subscription(
    "orders.email", topic=topic("orders"), handler=_email_handler, filter={"event": ["paid"]}
)


def test_publish_dead_letters_and_counts_of_an_sns_subscription(
    sns_world: SnsWorld, ministack_endpoint: str, tmp_path: Path
) -> None:
    arn = sns_world.topic("orders")
    binding = sns_world.subscribe(arn, EMAIL)
    env = {
        "AWS_ENDPOINT_URL": ministack_endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "ORDERS_TOPIC_ARN": arn,
        "EMAIL_QUEUE_URL": binding.queue_url,
        "EMAIL_DLQ_URL": binding.dead_letter_queue_url,
    }
    (tmp_path / "sns_app.py").write_text(SNS_APP)
    cli = Cli(tmp_path)
    receipt = cli.json(
        "publish", APP, "orders", "--payload", '"dead"', "--attribute", "event=paid",
        "--message-id", "m-1", env=env,
    )  # fmt: skip
    assert (receipt["message_id"], receipt["runs"], receipt["sequence"]) == ("m-1", [], None)
    assert receipt["provider_message_id"]
    notice = cli.run("publish", APP, "orders", "--attribute", "event=created", env=env).stderr
    assert "to SNS topic orders" in notice

    # The thin consumer dead-letters it, as the Lambda function would.
    (message,) = sns_world.receive_all(binding.queue_url, expected=1)
    handler = create_sns_lambda_handler(subscription=binding, client=sns_world.sqs)
    assert handler(sns_world.event(binding.queue_url, [message]), None) == {"batchItemFailures": []}
    sns_world.delete(binding.queue_url, [message])

    listed = cli.json("dead-letters", "list", APP, "--subscription", "orders.email", env=env)
    assert [(d["id"], d["reason"]) for d in listed["dead_letters"]] == [("m-1", "no address")]
    assert listed["next_cursor"] is None
    shown = cli.run("dead-letters", "show", APP, "m-1", "--subscription", "orders.email", env=env)
    assert "no address" in shown.stdout and "events of delivery" not in shown.stdout
    refused = cli.run("dead-letters", "list", APP, "--topic", "orders", env=env, expect=1)
    assert "error[configuration_invalid]" in refused.stderr
    table = cli.run("subscriptions", "list", APP, env=env).stdout
    assert "orders.email" in table and "~1" in table  # one approximate dead letter
    replayed = cli.run(
        "dead-letters", "replay", APP, "m-1", "--subscription", "orders.email", env=env
    )
    assert "back on its SQS queue" in replayed.stderr
    (again,) = sns_world.receive_all(binding.queue_url, expected=1)
    assert again["MessageAttributes"]["runlane_replay"]["StringValue"] == "1"
