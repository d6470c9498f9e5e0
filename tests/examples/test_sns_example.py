"""examples/sns: the Terraform shape built on Ministack, publishing and the Lambda consumers."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.examples.conftest import EXAMPLES, example_on_path

if TYPE_CHECKING:
    from tests.support.sns_world import SnsWorld

pytest_plugins = ["tests.support.ministack", "tests.support.sns_world"]

FOLDER = EXAMPLES / "sns"


def test_topology_json_is_what_topology_py_writes_from_the_subscriptions() -> None:
    with example_on_path("sns"):
        import topology

        expected = topology.topology()
    assert json.loads((FOLDER / "topology.json").read_text()) == expected
    assert set(expected["subscriptions"]) == {"orders.email", "orders.audit"}


@pytest.mark.parametrize(
    "setting",
    [
        r'function_response_types\s*=\s*\["ReportBatchItemFailures"\]',
        r"raw_message_delivery\s*=\s*true",
        r'filter_policy_scope\s*=\s*"MessageAttributes"',
        r"filter_policy\s*=\s*each\.value\.filter_policy == null \? null : "
        r"jsonencode\(each\.value\.filter_policy\)",
        r"maxReceiveCount\s*=\s*each\.value\.max_receive_count",
        r"visibility_timeout_seconds\s*=\s*var\.lambda_timeout",
        r'handler\s*=\s*"consumer\.handler"',
        r"RUNLANE_SUBSCRIPTION\s*=\s*each\.key",
        r"DEAD_LETTER_QUEUE_URL\s*=\s*aws_sqs_queue\.dead_letters\[each\.key\]\.url",
        r'jsondecode\(file\("\$\{path\.module\}/topology\.json"\)\)',
    ],
)
def test_main_tf_sets_what_the_consumer_relies_on(setting: str) -> None:
    assert re.search(setting, (FOLDER / "main.tf").read_text()), setting


def test_orders_reach_each_consumer_through_its_filter_and_bad_ones_are_dead_lettered(
    sns_world: SnsWorld,
    ministack_endpoint: str,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    aws = {
        "AWS_ENDPOINT_URL": ministack_endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
    }
    with example_on_path("sns"):
        import orders
        import topology

        subscriptions = dict(orders.SUBSCRIPTIONS)
        layout = topology.topology()["subscriptions"]
    # What main.tf creates, on the emulator.
    arn = sns_world.topic("orders")
    queues: dict[str, dict[str, str]] = {}
    for name, definition in subscriptions.items():
        binding = sns_world.subscribe(
            arn, definition, max_receive_count=layout[name]["max_receive_count"]
        )
        queues[name] = {
            "queue_url": binding.queue_url,
            "dead_letter_queue_url": binding.dead_letter_queue_url,
        }
    with example_on_path("sns", **aws, ORDERS_TOPIC_ARN=arn, ORDERS_QUEUES=json.dumps(queues)):
        import publisher

        rl = publisher.build_runtime(tmp_path / "app.db")
        event = publisher.OrderEvent
        publish = publisher.publish_order_event

        async def publish_all() -> None:
            good = event(order_id="o-1", customer="ada@example.com", total_cents=1200)
            receipt = await publish(rl, "created", good, message_id="o-1-c")
            assert receipt.runs == [] and receipt.provider_message_id
            await publish(rl, "paid", good, message_id="o-1-p")
            nobody = event(order_id="o-2", customer="", total_cents=5)
            await publish(rl, "created", nobody, message_id="o-2-c")
            negative = event(order_id="o-3", customer="bob@example.com", total_cents=-1)
            await publish(rl, "refunded", negative, message_id="o-3-r")
            await publish(rl, "shipped", good, message_id="o-1-s")

        rl.sync.call(publish_all())
    expected = {"orders.email": ["o-1-c", "o-1-p", "o-2-c"], "orders.audit": ["o-1-p", "o-3-r"]}
    caplog.set_level(logging.INFO, logger="orders")
    for name, ids in expected.items():
        urls = queues[name]
        messages = sns_world.receive_all(urls["queue_url"], expected=len(ids))
        got = sorted(json.loads(m["Body"])["message"]["id"] for m in messages)
        assert got == sorted(ids), name
        with example_on_path(
            "sns",
            **aws,
            RUNLANE_SUBSCRIPTION=name,
            QUEUE_URL=urls["queue_url"],
            DEAD_LETTER_QUEUE_URL=urls["dead_letter_queue_url"],
        ):
            import consumer

            response = consumer.handler(sns_world.event(urls["queue_url"], messages), None)
        assert response == {"batchItemFailures": []}, name
        sns_world.delete(urls["queue_url"], messages)
    logged = [record.getMessage() for record in caplog.records if record.name == "orders"]
    assert sorted(line.split(" (")[0] for line in logged if line.startswith("emailing")) == [
        "emailing ada@example.com about order o-1",
        "emailing ada@example.com about order o-1",
    ]
    assert [line for line in logged if line.startswith("audit")] == [
        "audit: paid of order o-1 for 1200 cents"
    ]

    def dead(name: str) -> list[tuple[str, str]]:
        found = rl.sync.call(publisher.dead_letters(rl, name))
        return [(d.id, d.reason) for d in found]

    try:
        assert dead("orders.email") == [("o-2-c", "the order has no customer to email")]
        assert dead("orders.audit") == [("o-3-r", "a negative total cannot be audited")]
    finally:
        rl.sync.close()
