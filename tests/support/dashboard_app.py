"""A small app with finished, failed, waiting and scheduled runs, for the dashboard tests.

``build_runtime(path)`` gives a fresh (unopened) runtime on a SQLite file (or a
lane), so a
dashboard under test and the test itself can each hold their own. ``seed(rl)``
fills it: succeeded greetings, a failed charge whose payload and error text
carry an HTML payload, a failed import whose failure carries a traceback, and
reports waiting on a bounded queue. The app also has an ``orders`` topic with an
ORDERED ledger subscription (keyed by customer) and an audit subscription, both
on the main queue; ``publish_orders(rl)`` publishes a few orders and drains them,
leaving a dead letter the ledger refuses (a negative amount) until it is replayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runlane import (
    DeliveryContext,
    Lane,
    Message,
    Outcome,
    RetryPolicy,
    Runlane,
    SubscriptionMode,
    queue,
    schedule,
    sqlite_lane,
    subscription,
    task,
    topic,
)
from runlane.testing import drain

#: Stored data that would run script if a page rendered it unescaped.
XSS_PAYLOAD = "<img src=x onerror=\"window.__runlaneXss=1;console.log('xss-executed')\">"
#: The last line of the traceback a failed feed import stores.
TRACEBACK_TAIL = "ConnectionError: feed.example unreachable"

main = queue("main", default=True)
reports = queue("reports", concurrency_limit=2)


#: What every greeting reports as its progress before it ends.
GREETING_PROGRESS = "greeted"


@task("greet")
async def greet(payload: Any, ctx: Any) -> dict[str, str]:
    await ctx.progress(0.5, message="greeting")
    await ctx.progress(1.0, message=GREETING_PROGRESS, data={"name": payload["name"]})
    return {"greeting": f"hello {payload['name']}"}


@task("charge", retry=RetryPolicy(max_attempts=1))
def charge(payload: Any, ctx: Any) -> None:
    raise ValueError(f"card declined for {payload['customer']}")


def fetch_feed(url: str) -> None:
    raise ConnectionError(f"{url} unreachable")


@task("import.feed", retry=RetryPolicy(max_attempts=1))
async def import_feed(payload: Any, ctx: Any) -> None:
    fetch_feed("feed.example")


@task(
    "reports.render",
    queue=reports,
    schedules=[schedule("reports.nightly", cron="0 3 * * *", timezone="Europe/Berlin")],
)
def render(payload: Any, ctx: Any) -> dict[str, int]:
    return {"pages": 3}


orders = topic("orders")
#: The reason the ledger dead-letters an order with a negative amount.
NEGATIVE_AMOUNT = "negative amount"


@subscription(
    "orders.ledger",
    topic=orders,
    mode=SubscriptionMode.ORDERED,
    key="customer",
    retry=RetryPolicy(max_attempts=1),
)
def post_to_ledger(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
    # A replay means an operator checked the order by hand: it goes through.
    if message.payload["cents"] < 0 and not ctx.is_replay:
        return Outcome.dead_letter(f"{NEGATIVE_AMOUNT} on order {message.payload['order_id']}")
    return None


@subscription("orders.audit", topic=orders)
async def audit_order(message: Message[Any], ctx: DeliveryContext) -> None:
    return None


def build_runtime(store: Path | str | Lane, **options: Any) -> Runlane:
    """A runtime of this app on a SQLite file path, or on ``store`` when it is a lane
    (not opened yet)."""
    return Runlane(
        lane=store if isinstance(store, Lane) else sqlite_lane(str(store)),
        queues=[main, reports],
        tasks=[greet, charge, import_feed, render],
        topics=[orders],
        subscriptions=[post_to_ledger, audit_order],
        **options,
    )


@dataclass(frozen=True)
class Seeded:
    """Ids of the runs :func:`seed` made, by what they are."""

    greetings: list[str]
    failed_charge: str
    failed_import: str
    reports: list[str]


async def seed(rl: Runlane) -> Seeded:
    """Trigger and execute the runs every dashboard test starts from (on a migrated store)."""
    greetings = [await rl.trigger(greet, {"name": name}) for name in ("Ada", "Grace", "Alan")]
    failed_charge = await rl.trigger(charge, {"customer": XSS_PAYLOAD})
    failed_import = await rl.trigger(import_feed, {"url": "https://feed.example/"})
    await drain(rl, queues=[main])
    waiting = [await rl.trigger(render, {"month": month}) for month in ("2026-10", "2026-11")]
    return Seeded(
        greetings=[run.id for run in greetings],
        failed_charge=failed_charge.id,
        failed_import=failed_import.id,
        reports=[run.id for run in waiting],
    )


@dataclass(frozen=True)
class PublishedOrders:
    """What :func:`publish_orders` left behind."""

    #: The ledger delivery of ada's refused order: a dead letter heading her key.
    dead_letter: str
    #: The ledger delivery of ada's next order, waiting behind the dead letter.
    waiting: str
    #: The ledger delivery of bo's refused order, whose payload holds an HTML payload.
    xss_dead_letter: str


async def publish_orders(rl: Runlane) -> PublishedOrders:
    """Publish three orders and run what can run: two ledger dead letters, one waiting."""
    refused = await rl.publish(
        orders, {"order_id": 1, "cents": -500}, attributes={"customer": "ada"}
    )
    behind = await rl.publish(orders, {"order_id": 2, "cents": 700}, attributes={"customer": "ada"})
    hostile = await rl.publish(
        orders, {"order_id": 3, "cents": -1, "note": XSS_PAYLOAD}, attributes={"customer": "bo"}
    )
    await drain(rl, queues=[main])

    def ledger(receipt: Any) -> str:
        (run,) = [run for run in receipt.runs if run.task_id == "orders.ledger"]
        return str(run.id)

    return PublishedOrders(
        dead_letter=ledger(refused), waiting=ledger(behind), xss_dead_letter=ledger(hostile)
    )
