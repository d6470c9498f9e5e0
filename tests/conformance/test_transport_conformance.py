"""Every transport passes the shared conformance suite: in memory, and SQS on Ministack."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from runlane.model.queue_defs import QueueDef
from runlane.ports.transport import Transport
from runlane.ports.wakeup_envelope import create_wakeup_body
from runlane.sqs import SqsFifo, sqs_queue, sqs_transport
from runlane.testing.conformance.transport import *  # noqa: F403
from runlane.testing.conformance.transport import Delivered
from runlane.transport.memory import MemoryTransport

pytest_plugins = ["tests.support.ministack"]

TRANSPORTS = ["memory", "sqs-standard", "sqs-fifo"]


class _MemoryHarness:
    def __init__(self) -> None:
        self.transport: MemoryTransport | None = None
        self.read: set[int] = set()

    def build(self, queues: Sequence[QueueDef]) -> Transport:
        self.transport, self.read = MemoryTransport(queues), set()
        return self.transport

    async def delivered(self, queue: QueueDef) -> list[Delivered]:
        assert self.transport is not None
        unread = [
            (index, attempt)
            for index, attempt in enumerate(self.transport.published)
            if index not in self.read and attempt.message.queue == queue.name
        ]
        self.read.update(index for index, _ in unread)
        return [
            Delivered(f"memory-{attempt.outbox_id}", create_wakeup_body(attempt.message))
            for _, attempt in unread
        ]


class _SqsHarness:
    def __init__(self, client: Any, make_queue: Callable[..., str], *, fifo: bool) -> None:
        self.client, self.make_queue, self.fifo = client, make_queue, fifo
        self.urls: dict[str, str] = {}

    def build(self, queues: Sequence[QueueDef]) -> Transport:
        self.urls = {
            q.name: self.make_queue(f"conformance-{q.name}", fifo=self.fifo) for q in queues
        }
        bindings = [
            sqs_queue(q, queue_url=self.urls[q.name], fifo=SqsFifo() if self.fifo else None)
            for q in queues
        ]
        return sqs_transport(client=self.client, queues=bindings)

    async def delivered(self, queue: QueueDef) -> list[Delivered]:
        return await asyncio.to_thread(self._drain, self.urls[queue.name])

    def _drain(self, url: str) -> list[Delivered]:
        delivered: list[Delivered] = []
        while True:
            messages = self.client.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            ).get("Messages", [])
            if not messages:
                return delivered
            delivered.extend(Delivered(m["MessageId"], m["Body"]) for m in messages)
            self.client.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages)
                ],
            )


@pytest.fixture(params=TRANSPORTS)
def harness(request: pytest.FixtureRequest) -> _MemoryHarness | _SqsHarness:
    """The transport under test and a way to read back what it delivered."""
    if request.param == "memory":
        return _MemoryHarness()
    return _SqsHarness(
        request.getfixturevalue("sqs_client"),
        request.getfixturevalue("sqs_queue_factory"),
        fifo=request.param == "sqs-fifo",
    )


@pytest.fixture
def transport_factory(harness: _MemoryHarness | _SqsHarness) -> Callable[..., Transport]:
    """Builds a transport bound to the given queues (fresh provider queues for SQS)."""
    return harness.build


@pytest.fixture
def delivered_wakeups(harness: _MemoryHarness | _SqsHarness) -> Callable[..., Any]:
    """Reads (and acknowledges) the messages delivered for a queue."""
    return harness.delivered
