"""SNS topics beside raw boto3 on a local Ministack: publish rate and Lambda-handler records/s.

Each figure is messages (records) per second; the ratio runlane/raw says how much
of what bare boto3 gets out of the same emulator runlane keeps while adding its
work:

- **publish**: ``SnsTransport.publish_message`` (publish validation, the v1
  envelope, its size check, typed failures, the boto3 call on a worker thread)
  beside ``sns.publish`` of a ready-made envelope with the same attributes, both
  to a topic with one subscribed queue, ``--concurrency`` calls in flight each;
- **Lambda handler**: ``create_sns_lambda_handler`` over the records of
  ``ReceiveMessage`` (10 at a time, every attribute), then ``DeleteMessageBatch``
  of the acknowledged records as Lambda does, beside a loop that receives the
  same way, ``json.loads`` each body and deletes the batch. The subscription's
  handler is an async no-op. Both drain a queue filled beforehand.

    .venv/bin/python bench/bench_sns.py                  # 2,000 messages x 3 rounds, own emulator
    .venv/bin/python bench/bench_sns.py --messages 500 --json
    .venv/bin/python bench/bench_sns.py --concurrency 8 --endpoint http://127.0.0.1:4566
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from tests.support.ministack import MinistackServer, aws_client
from tests.support.sns_world import SnsWorld, lambda_record

from runlane.sns import (
    SnsSubscriptionBinding,
    create_sns_lambda_handler,
    create_sns_message_body,
    sns_topic,
    sns_transport,
)
from runlane.topics.definitions import subscription, topic
from runlane.topics.messages import Message

DEFAULT_MESSAGES = 2_000
SQS_BATCH = 10
RECEIVE_WAIT_SECONDS = 1
ATTRIBUTES = {"event": "paid", "region": "eu"}
EVENTS = topic("events")


async def _noop(message: Any, ctx: Any) -> None:
    return None


SUBSCRIPTION = subscription("events.bench", topic=EVENTS, handler=_noop)


def _fresh(world: SnsWorld) -> tuple[str, SnsSubscriptionBinding]:
    arn = world.topic("bench")
    return arn, world.subscribe(arn, SUBSCRIPTION)


def _body(index: int) -> str:
    message = Message(
        id=f"bench-{uuid.uuid4().hex}",
        topic="events",
        payload={"index": index, "customer": "c-42"},
        attributes=ATTRIBUTES,
        published_at=datetime.now(UTC),
        sequence=None,
    )
    return create_sns_message_body(message, environment="bench")


# -- publish -------------------------------------------------------------------------


async def runlane_publish(world: SnsWorld, count: int, concurrency: int) -> float:
    """Seconds for ``count`` ``publish_message`` calls, ``concurrency`` in flight."""
    arn, _ = _fresh(world)
    transport = sns_transport(client=world.sns, topics=[sns_topic(EVENTS, topic_arn=arn)])
    slots = asyncio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with slots:
            await transport.publish_message(
                EVENTS,
                {"index": index, "customer": "c-42"},
                environment="bench",
                now=datetime.now(UTC),
                attributes=ATTRIBUTES,
            )

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.perf_counter() - started


def raw_publish(world: SnsWorld, count: int, concurrency: int) -> float:
    """Seconds for ``count`` ``sns.publish`` calls of ready-made envelopes."""
    arn, _ = _fresh(world)
    bodies = [_body(i) for i in range(count)]
    attributes = {k: {"DataType": "String", "StringValue": v} for k, v in ATTRIBUTES.items()}

    def one(body: str) -> None:
        world.sns.publish(TopicArn=arn, Message=body, MessageAttributes=attributes)

    started = time.perf_counter()
    if concurrency == 1:
        for body in bodies:
            one(body)
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, bodies))
    return time.perf_counter() - started


# -- consume -------------------------------------------------------------------------


def _filled(world: SnsWorld, count: int) -> SnsSubscriptionBinding:
    """A subscription queue holding ``count`` messages as SNS raw delivery leaves them."""
    _, binding = _fresh(world)
    attributes = {k: {"DataType": "String", "StringValue": v} for k, v in ATTRIBUTES.items()}
    for start in range(0, count, SQS_BATCH):
        entries = [
            {"Id": str(i), "MessageBody": _body(start + i), "MessageAttributes": attributes}
            for i in range(min(SQS_BATCH, count - start))
        ]
        world.sqs.send_message_batch(QueueUrl=binding.queue_url, Entries=entries)
    return binding


def _receive(world: SnsWorld, url: str) -> list[dict[str, Any]]:
    return list(
        world.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=SQS_BATCH,
            WaitTimeSeconds=RECEIVE_WAIT_SECONDS,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
    )


def _delete(world: SnsWorld, url: str, messages: list[dict[str, Any]]) -> None:
    if messages:
        world.sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )


def runlane_handler(world: SnsWorld, count: int) -> float:
    """Seconds for the Lambda handler to take every record, with Lambda's deletes."""
    binding = _filled(world, count)
    url = binding.queue_url
    arn = world.queue_arn(url)
    handler = create_sns_lambda_handler(subscription=binding, client=world.sqs)
    done = 0
    started = time.perf_counter()
    while done < count:
        messages = _receive(world, url)
        if not messages:
            continue
        response = handler({"Records": [lambda_record(m, arn) for m in messages]}, None)
        failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
        if failed:
            raise SystemExit(f"the handler failed {len(failed)} record(s)")
        _delete(world, url, messages)
        done += len(messages)
    return time.perf_counter() - started


def raw_handler(world: SnsWorld, count: int) -> float:
    """Seconds for a receive / ``json.loads`` / delete loop over the same records."""
    binding = _filled(world, count)
    url = binding.queue_url
    done = 0
    started = time.perf_counter()
    while done < count:
        messages = _receive(world, url)
        for message in messages:
            json.loads(message["Body"])
        _delete(world, url, messages)
        done += len(messages)
    return time.perf_counter() - started


# -- report --------------------------------------------------------------------------


def measure(world: SnsWorld, count: int, concurrency: int, rounds: int) -> list[dict[str, Any]]:
    """Run every pair ``rounds`` times on fresh resources, alternating which side goes
    first (the emulator and a shared machine drift), and keep the median rate of each."""
    pairs: list[tuple[str, Callable[[], float], Callable[[], float]]] = [
        (
            f"publish x{concurrency} (publish_message vs sns.publish)",
            lambda: asyncio.run(runlane_publish(world, count, concurrency)),
            lambda: raw_publish(world, count, concurrency),
        ),
        (
            "Lambda handler (records vs receive/delete loop)",
            lambda: runlane_handler(world, count),
            lambda: raw_handler(world, count),
        ),
    ]
    rows = []
    for name, runlane_side, raw_side in pairs:
        runlane_rates: list[float] = []
        raw_rates: list[float] = []
        for round_number in range(rounds):
            sides = [(runlane_side, runlane_rates), (raw_side, raw_rates)]
            for side, rates in sides if round_number % 2 == 0 else reversed(sides):
                rates.append(count / side())
        runlane_rate, raw_rate = statistics.median(runlane_rates), statistics.median(raw_rates)
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
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--concurrency", type=int, default=1, help="Publishes in flight.")
    parser.add_argument("--rounds", type=int, default=3, help="Medians of this many runs.")
    parser.add_argument("--endpoint", help="Use a running SNS/SQS-compatible server instead.")
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args()
    server = None if args.endpoint else MinistackServer()
    try:
        if server is not None:
            server.start()
        endpoint = args.endpoint or (server.endpoint if server else "")
        world = SnsWorld(aws_client("sns", endpoint), aws_client("sqs", endpoint))
        try:
            rows = measure(world, args.messages, args.concurrency, args.rounds)
        finally:
            world.close()
    finally:
        if server is not None:
            server.close()
    if args.json:
        print(
            json.dumps(
                {"messages": args.messages, "rounds": args.rounds, "results": rows}, indent=2
            )
        )
        return
    print(
        f"{args.messages:,} messages through Ministack on loopback, median of {args.rounds}; "
        "per second"
    )
    print(f"{'operation':<52}{'runlane':>10}{'raw':>10}{'runlane/raw':>13}")
    for row in rows:
        print(
            f"{row['operation']:<52}{row['runlane_per_second']:>10,}"
            f"{row['raw_per_second']:>10,}{row['ratio']:>13.3f}"
        )


if __name__ == "__main__":
    main()
