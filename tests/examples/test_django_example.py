"""examples/django: orders enqueue their receipt inside ``transaction.atomic()``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.core.management import call_command
from django.test import Client
from django.test.utils import setup_test_environment, teardown_test_environment
from tests.examples.conftest import example_on_path, run_in_example

from runlane import RunStatus
from runlane.testing.sync import all_triggered, assert_triggered

PAID_CARD = "4242424242424242"


@pytest.fixture(scope="module")
def shop(example_database: str) -> Iterator[dict[str, Any]]:
    """The Django project, set up and migrated (which migrates Runlane too) on its database."""
    environ = {"DATABASE_URL": example_database, "DJANGO_SETTINGS_MODULE": "shop.settings"}
    with example_on_path("django", **environ) as root:
        django.setup()
        setup_test_environment()
        call_command("migrate", verbosity=0)
        from orders import jobs, models, services

        try:
            yield {
                "root": root,
                "env": environ,
                "jobs": jobs,
                "models": models,
                "services": services,
            }
        finally:
            jobs.rl.sync.close()
            teardown_test_environment()


def _order(**fields: str) -> Any:
    body = {"email": "ada@example.com", "total": "12.50", "card": PAID_CARD, **fields}
    return Client().post("/orders", body, content_type="application/json")


def test_a_paid_order_commits_together_with_its_receipt_run(shop: dict[str, Any]) -> None:
    response = _order()

    assert response.status_code == 201
    order_id = response.json()["order_id"]
    (run,) = assert_triggered(
        shop["jobs"].rl, "orders.send_receipt", payload={"order_id": order_id}
    )
    assert run.status is RunStatus.QUEUED


def test_a_declined_order_rolls_back_and_leaves_no_run(shop: dict[str, Any]) -> None:
    rl, Order = shop["jobs"].rl, shop["models"].Order
    runs_before = len(all_triggered(rl, "orders.send_receipt"))

    response = _order(email="declined@example.com", card=shop["services"].DECLINED_CARD)

    assert response.status_code == 402
    assert not Order.objects.filter(email="declined@example.com").exists()
    assert len(all_triggered(rl, "orders.send_receipt")) == runs_before


def test_the_worker_command_sends_the_receipts(shop: dict[str, Any]) -> None:
    order_id = _order(email="bo@example.com").json()["order_id"]

    run_in_example(shop["root"], "manage.py", "runlane_worker", "--drain", env=shop["env"])

    order = shop["models"].Order.objects.get(pk=order_id)
    assert order.receipt_sent_at is not None
    assert_triggered(
        shop["jobs"].rl,
        "orders.send_receipt",
        payload={"order_id": order_id},
        status=RunStatus.SUCCEEDED,
        result={"sent_to": "bo@example.com"},
    )


def test_the_runlane_command_finds_the_runtime_with_the_settings_named(
    shop: dict[str, Any],
) -> None:
    order_id = _order(email="cy@example.com").json()["order_id"]

    run_in_example(shop["root"], "-m", "runlane", "tick", "orders.jobs:rl", env=shop["env"])
    listed = run_in_example(
        shop["root"], "-m", "runlane", "runs", "list", "orders.jobs:rl", "--json", env=shop["env"]
    )

    (run,) = assert_triggered(
        shop["jobs"].rl, "orders.send_receipt", payload={"order_id": order_id}
    )
    assert run.id in [row["id"] for row in json.loads(listed)["runs"]]
