"""Every topic transport passes the shared conformance suite: SNS standard and FIFO on Ministack."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from runlane.ports.topic_transport import TopicTransport
from runlane.sns import SnsSubscriptionBinding, sns_topic, sns_transport
from runlane.testing.conformance.topic_transport import *  # noqa: F403
from runlane.topics.definitions import SubscriptionDef, TopicDef

if TYPE_CHECKING:
    from tests.support.sns_world import SnsWorld

pytest_plugins = ["tests.support.ministack", "tests.support.sns_world"]


class _SnsHarness:
    def __init__(self, world: SnsWorld, *, fifo: bool) -> None:
        self.world, self.fifo = world, fifo
        self.bindings: dict[str, SnsSubscriptionBinding] = {}

    def build(
        self, topics: Sequence[TopicDef], subscriptions: Sequence[SubscriptionDef]
    ) -> TopicTransport:
        arns = {t.name: self.world.topic(f"conformance-{t.name}", fifo=self.fifo) for t in topics}
        self.bindings = {
            s.name: self.world.subscribe(arns[s.topic.name], s, visibility_timeout=30)
            for s in subscriptions
        }
        return sns_transport(
            client=self.world.sns,
            sqs_client=self.world.sqs,
            topics=[sns_topic(t, topic_arn=arns[t.name]) for t in topics],
            subscriptions=list(self.bindings.values()),
        )

    async def delivered(self, sub: SubscriptionDef) -> list[str]:
        return await asyncio.to_thread(self._drain, self.bindings[sub.name].queue_url)

    def _drain(self, url: str) -> list[str]:
        bodies: list[str] = []
        empty = 0
        while empty < 2:  # SNS fans out asynchronously: one empty long poll is not the end
            messages = self.world.receive(url, wait=1)
            if not messages:
                empty += 1
                continue
            bodies.extend(m["Body"] for m in messages)
            self.world.delete(url, messages)
        return bodies


@pytest.fixture(params=["sns-standard", "sns-fifo"])
def harness(request: pytest.FixtureRequest) -> _SnsHarness:
    """The topic transport under test and a way to read back what it delivered."""
    return _SnsHarness(request.getfixturevalue("sns_world"), fifo=request.param == "sns-fifo")


@pytest.fixture
def topic_transport_factory(harness: _SnsHarness) -> Callable[..., TopicTransport]:
    """Builds a transport carrying the given topics (fresh SNS topics and SQS queues)."""
    return harness.build


@pytest.fixture
def delivered_bodies(harness: _SnsHarness) -> Callable[..., Any]:
    """Reads (and acknowledges) the bodies delivered to a subscription."""
    return harness.delivered
