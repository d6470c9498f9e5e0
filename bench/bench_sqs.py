"""The SQS transport and consumer beside raw boto3 loops, on a local Ministack.

Each figure is wakeups (messages) per second; the ratio runlane/raw says how
much of what bare boto3 gets out of the same emulator the transport keeps while
adding the v1 envelope, index-aligned outcomes and typed failures, and the
consumer keeps while parsing, calling ``execute_delivery`` and deleting only
what resolved. Raw boto3 does the same provider calls one after another with the same
bodies: ``SendMessageBatch`` of 10, then ``ReceiveMessage`` (10 at a time,
``json.loads`` of each body) followed by ``DeleteMessageBatch``. Every
measurement gets a fresh queue; both consumers drain a queue filled beforehand.

    .venv/bin/python bench/bench_sqs.py                  # 10,000 wakeups, own emulator
    .venv/bin/python bench/bench_sqs.py --wakeups 2000 --json
    .venv/bin/python bench/bench_sqs.py --endpoint http://127.0.0.1:4566
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from tests.support.ministack import MinistackServer, aws_client

from runlane import queue
from runlane.ports.transport import (
    DeliveryMessage,
    WakeupAttempt,
    WakeupPublished,
)
from runlane.sqs import (
    create_sqs_delivery_consumer,
    create_sqs_wakeup_body,
    sqs_queue,
    sqs_transport,
)

DEFAULT_WAKEUPS = 10_000
#: Wakeups handed to one ``publish_wakeups`` call, as the outbox publishes a claimed batch.
PUBLISH_CALL_SIZE = 100
#: Long-poll wait of both receive loops; the queue is full, so it rarely waits.
RECEIVE_WAIT_SECONDS = 1
SQS_BATCH = 10

bench_queue = queue("bench", default=True)


def _attempts(count: int) -> list[WakeupAttempt]:
    return [
        WakeupAttempt(DeliveryMessage("bench", f"run-{n}", "bench"), f"outbox-{n}")
        for n in range(count)
    ]


def _fresh_queue(client: Any) -> str:
    return str(client.create_queue(QueueName=f"bench-{uuid.uuid4().hex[:10]}")["QueueUrl"])


# -- Runlane -------------------------------------------------------------------------


async def runlane_publish(client: Any, url: str, wakeups: int) -> float:
    """Seconds for ``publish_wakeups`` of every wakeup, ``PUBLISH_CALL_SIZE`` per call."""
    transport = sqs_transport(client=client, queues=[sqs_queue(bench_queue, queue_url=url)])
    attempts = _attempts(wakeups)
    started = time.perf_counter()
    for start in range(0, wakeups, PUBLISH_CALL_SIZE):
        outcomes = await transport.publish_wakeups(attempts[start : start + PUBLISH_CALL_SIZE])
        if not all(isinstance(outcome, WakeupPublished) for outcome in outcomes):
            raise SystemExit("the transport failed to publish a wakeup")
    return time.perf_counter() - started


async def runlane_consume(client: Any, url: str, wakeups: int) -> float:
    """Seconds for a consumer to receive, execute (no-op) and delete every wakeup."""
    executed = 0
    all_executed = asyncio.Event()

    async def execute_delivery(message: DeliveryMessage, **options: Any) -> None:
        nonlocal executed
        executed += 1
        if executed == wakeups:
            all_executed.set()

    consumer = create_sqs_delivery_consumer(
        client=client,
        queue_url=url,
        execute_delivery=execute_delivery,
        wait_time_seconds=RECEIVE_WAIT_SECONDS,
    )
    started = time.perf_counter()
    await consumer.start()
    await all_executed.wait()
    await consumer.stop()
    elapsed = time.perf_counter() - started
    await consumer.closed
    return elapsed


# -- raw boto3 -----------------------------------------------------------------------


def raw_publish(client: Any, url: str, wakeups: int) -> float:
    """Seconds for ``SendMessageBatch`` calls of 10 ready-made wakeup bodies each."""
    bodies = [create_sqs_wakeup_body(attempt.message) for attempt in _attempts(wakeups)]
    started = time.perf_counter()
    for start in range(0, wakeups, SQS_BATCH):
        entries = [
            {"Id": str(i), "MessageBody": body}
            for i, body in enumerate(bodies[start : start + SQS_BATCH])
        ]
        response = client.send_message_batch(QueueUrl=url, Entries=entries)
        if response.get("Failed"):
            raise SystemExit("raw SendMessageBatch refused an entry")
    return time.perf_counter() - started


def raw_consume(client: Any, url: str, wakeups: int) -> float:
    """Seconds for ``ReceiveMessage`` + ``DeleteMessageBatch`` until every message is gone."""
    deleted = 0
    started = time.perf_counter()
    while deleted < wakeups:
        messages = client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=SQS_BATCH, WaitTimeSeconds=RECEIVE_WAIT_SECONDS
        ).get("Messages", [])
        for message in messages:
            json.loads(message["Body"])
        if messages:
            client.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages)
                ],
            )
            deleted += len(messages)
    return time.perf_counter() - started


# -- report --------------------------------------------------------------------------


def measure(client: Any, wakeups: int) -> list[dict[str, Any]]:
    """Run every pair and return one row per operation."""

    def consume_pair(consume: Callable[[Any, str, int], float]) -> Callable[[], float]:
        def run() -> float:
            url = _fresh_queue(client)
            raw_publish(client, url, wakeups)
            return consume(client, url, wakeups)

        return run

    pairs: list[tuple[str, Callable[[], float], Callable[[], float]]] = [
        (
            "publish (publish_wakeups vs SendMessageBatch)",
            lambda: asyncio.run(runlane_publish(client, _fresh_queue(client), wakeups)),
            lambda: raw_publish(client, _fresh_queue(client), wakeups),
        ),
        (
            "consume (consumer vs receive/delete loop)",
            consume_pair(lambda c, u, n: asyncio.run(runlane_consume(c, u, n))),
            consume_pair(raw_consume),
        ),
    ]
    rows = []
    for name, runlane_side, raw_side in pairs:
        runlane_rate = wakeups / runlane_side()
        raw_rate = wakeups / raw_side()
        rows.append(
            {
                "operation": name,
                "runlane_per_second": round(runlane_rate),
                "raw_per_second": round(raw_rate),
                "ratio": round(runlane_rate / raw_rate, 3),
            }
        )
    return rows


def main() -> None:
    """Parse options, start the emulator unless given one, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wakeups", type=int, default=DEFAULT_WAKEUPS)
    parser.add_argument("--endpoint", help="Use a running SQS-compatible server instead.")
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args()
    server = None if args.endpoint else MinistackServer()
    try:
        if server is not None:
            server.start()
        endpoint = args.endpoint or (server.endpoint if server else "")
        rows = measure(aws_client("sqs", endpoint), args.wakeups)
    finally:
        if server is not None:
            server.close()
    if args.json:
        print(json.dumps({"wakeups": args.wakeups, "results": rows}, indent=2))
        return
    print(f"{args.wakeups:,} wakeups through Ministack on loopback; messages per second")
    print(f"{'operation':<48}{'runlane':>10}{'raw':>10}{'runlane/raw':>13}")
    for row in rows:
        print(
            f"{row['operation']:<48}{row['runlane_per_second']:>10,}"
            f"{row['raw_per_second']:>10,}{row['ratio']:>13.3f}"
        )


if __name__ == "__main__":
    main()
