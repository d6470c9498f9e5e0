"""The demo's fan-out: one topic, three subscriptions, and a dead letter that is replayed.

Each message fans out to a receipt mailer (every message), a ledger that keeps
each customer's entries in order, and a warehouse that handles paid orders one
at a time per customer. One message is malformed: the ledger dead-letters it,
which halts that customer's ledger until the demo replays it (the ledger then
accepts it, as a fixed handler would).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runlane import (
    DeliveryContext,
    Message,
    Outcome,
    Runlane,
    RunStatus,
    SubscriptionMode,
    WorkerMode,
    queue,
    sqlite_lane,
    subscription,
    topic,
)

CUSTOMERS = 5
EVENTS = ("created", "paid")

events = queue("events", default=True)
orders = topic("demo.orders")


@subscription("orders.receipts", topic=orders)
async def send_receipt(message: Message[Any], ctx: DeliveryContext) -> None:
    """Every message: mail a receipt (keyless, in parallel)."""
    return None


@subscription("orders.ledger", topic=orders, mode=SubscriptionMode.ORDERED, key="customer")
def post_to_ledger(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
    """Each customer's entries in publish order; a malformed one is parked for an operator."""
    if message.payload.get("malformed") and not ctx.is_replay:
        return Outcome.dead_letter("ledger rejected a malformed entry")
    return None


@subscription(
    "orders.warehouse",
    topic=orders,
    filter={"event": ["paid"]},
    mode=SubscriptionMode.EXCLUSIVE,
    key="customer",
)
async def pick_and_pack(message: Message[Any], ctx: DeliveryContext) -> None:
    """Paid orders only, one at a time per customer."""
    return None


SUBSCRIPTIONS = (send_receipt, post_to_ledger, pick_and_pack)


@dataclass
class FanOutResult:
    """What the fan-out did."""

    messages: int
    deliveries: int
    dead_lettered: int
    halted_keys: int
    replayed: int
    succeeded: int

    def as_dict(self) -> dict[str, int]:
        """JSON form."""
        return {
            "messages": self.messages,
            "deliveries": self.deliveries,
            "dead_lettered": self.dead_lettered,
            "halted_keys": self.halted_keys,
            "replayed": self.replayed,
            "succeeded": self.succeeded,
        }


def build_fanout_runtime(path: Path, environment: str) -> Runlane:
    """The fan-out's runtime on the demo's SQLite file, in an environment of its own."""
    return Runlane(
        lane=sqlite_lane(path),
        queues=[events],
        tasks=[],
        topics=[orders],
        subscriptions=SUBSCRIPTIONS,
        environment=environment,
    )


async def run_fanout(rl: Runlane, messages: int, concurrency: int) -> FanOutResult:
    """Publish ``messages`` orders (one malformed), drain, replay the dead letter, drain."""
    deliveries = 0
    malformed = messages // 2
    async with rl:
        for number in range(messages):
            receipt = await rl.publish(
                orders,
                {"order": number, "malformed": number == malformed},
                attributes={
                    "customer": f"c{number % CUSTOMERS}",
                    "event": EVENTS[number % len(EVENTS)],
                },
            )
            deliveries += len(receipt.runs)
        await _drain(rl, concurrency)
        letters = (await rl.dead_letters.list()).data
        halted = (await rl.subscriptions.get(post_to_ledger)).halted_keys
        for letter in letters:
            await rl.dead_letters.replay(
                letter.id, reason="ledger fixed; entry accepted now", actor="demo"
            )
        await _drain(rl, concurrency)
        stats = await rl.subscriptions.list()
    return FanOutResult(
        messages=messages,
        deliveries=deliveries,
        dead_lettered=len(letters),
        halted_keys=halted,
        replayed=len(letters),
        succeeded=sum(s.counts.get(RunStatus.SUCCEEDED, 0) for s in stats),
    )


async def _drain(rl: Runlane, concurrency: int) -> None:
    """Run workers until nothing more can run: a dead letter waits for an operator, and
    an ORDERED key it halts keeps its later deliveries waiting too."""
    waiting = -1
    while True:
        await rl.worker(mode=WorkerMode.DRAIN, concurrency=concurrency, handle_signals=False).run()
        stats = await rl.subscriptions.list()
        now_waiting = sum(s.waiting + s.running for s in stats)
        if now_waiting in (0, waiting):
            return
        waiting = now_waiting
