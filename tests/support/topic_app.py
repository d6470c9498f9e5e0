"""A small topics app run by multi-process tests: ``python -m tests.support.topic_app``.

One topic, ``orders``, with two subscriptions keyed by the ``customer`` attribute:
``orders.exclusive`` (EXCLUSIVE) and ``orders.ordered`` (ORDERED). Their handlers
record when they start and end in the ``app_log`` table (the one of
``tests.support.worker_app``), so the test process can check, from inside the
handlers, that no key ever had two deliveries in flight and that each key ran in
publish order. The store is RUNLANE_APP_DSN, the environment RUNLANE_APP_ENV.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import psycopg

from runlane import (
    DeliveryContext,
    Message,
    Outcome,
    Runlane,
    SubscriptionMode,
    WorkerMode,
    postgres_lane,
    queue,
    subscription,
    topic,
)
from runlane.ports.transport import DeliveryMessage

DSN = os.environ.get("RUNLANE_APP_DSN", "")
ENVIRONMENT = os.environ.get("RUNLANE_APP_ENV", "default")
#: Seconds each handler holds its delivery, so that claims of one key meet.
HOLD = float(os.environ.get("RUNLANE_APP_HOLD", "0.01"))
#: Seconds after which a delivery's first attempt asks to be retried (0: never).
RETRY_FIRST = float(os.environ.get("RUNLANE_APP_RETRY_FIRST", "0"))

main = queue("main", default=True)
orders = topic("orders")

_log: psycopg.AsyncConnection[Any] | None = None


async def _record(kind: str, ctx: DeliveryContext, n: int, started: bool) -> None:
    global _log
    if _log is None or _log.closed:
        _log = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
        await _log.execute("SET synchronous_commit = off")
    # The key column holds "customer/n": the key and the message's place in it.
    await _log.execute(
        "INSERT INTO app_log (environment, kind, run_id, key, phase, at, pid) "
        "VALUES (%s, %s, %s, %s, %s, clock_timestamp(), %s)",
        (
            ENVIRONMENT,
            kind,
            ctx.run_id,
            f"{ctx.key}/{n}",
            "start" if started else "end",
            os.getpid(),
        ),
    )


async def _hold(kind: str, message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
    n = int(message.payload["n"])
    await _record(kind, ctx, n, True)
    await asyncio.sleep(HOLD)
    await _record(kind, ctx, n, False)
    if RETRY_FIRST and ctx.attempt == 1:
        # Due again a moment later: a key's deliveries come due at different times,
        # so workers' claims pick different deliveries of one key.
        return Outcome.retry("once more", delay=RETRY_FIRST)
    return None


@subscription("orders.exclusive", topic=orders, mode=SubscriptionMode.EXCLUSIVE, key="customer")
async def exclusive(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
    """Holds its customer's key for a moment."""
    return await _hold("exclusive", message, ctx)


@subscription("orders.ordered", topic=orders, mode=SubscriptionMode.ORDERED, key="customer")
async def ordered(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
    """Holds its customer's key for a moment, in publish order."""
    return await _hold("ordered", message, ctx)


def build_runtime(dsn: str, environment: str) -> Runlane:
    """The app's runtime (the test process builds the same one to publish and check)."""
    return Runlane(
        lane=postgres_lane(dsn),
        queues=[main],
        tasks=[],
        topics=[orders],
        subscriptions=[exclusive, ordered],
        environment=environment,
        lease_duration="3s",
    )


async def _wake(rl: Runlane) -> None:
    """Act as wakeups do on a transport lane: ``execute_delivery`` of deliveries picked
    at random among those waiting, whatever their key (most are ignored)."""
    schema = getattr(rl.storage, "schema", "runlane")
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        while True:
            cursor = await conn.execute(
                f"SELECT id, queue FROM {schema}.runlane_runs"
                " WHERE environment = %s AND status IN ('queued', 'retrying')"
                " ORDER BY random() LIMIT 8",
                (ENVIRONMENT,),
            )
            rows = await cursor.fetchall()
            wakeups = [DeliveryMessage(environment=ENVIRONMENT, run_id=i, queue=q) for i, q in rows]
            await asyncio.gather(*(rl.execute_delivery(w) for w in wakeups))
            await asyncio.sleep(0.005)


async def _main() -> None:
    rl = build_runtime(DSN, ENVIRONMENT)
    async with rl:
        if os.environ.get("RUNLANE_APP_ROLE") == "wakeups":
            await _wake(rl)
            return
        await rl.worker(
            concurrency=int(os.environ.get("RUNLANE_APP_CONCURRENCY", "8")),
            mode=WorkerMode.POLL,
            poll_interval="20ms",
            maintenance_interval="1s",
        ).run()


if __name__ == "__main__":
    asyncio.run(_main())
