"""Fuzzing the long-running SQS consumer on Ministack with real runs on each storage driver.

Each example sends a mix of wakeups for real runs (some twice), wakeups for runs
that do not exist, and garbage bodies to a fresh queue, and lets a consumer wired
to ``rl.execute_delivery`` work through them. Every good run executes exactly
once; wakeups that resolve (executed or ignored) are deleted; garbage stays in
the queue for its redrive policy; and the consumer never dies of a bad body.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import LaneFactory

from runlane import Context, Runlane, RunStatus, queue, task
from runlane.ports.transport import DeliveryMessage
from runlane.sqs import create_sqs_delivery_consumer, create_sqs_wakeup_body
from runlane.testing import wait_for_status

pytest_plugins = ["tests.support.ministack"]
pytestmark = pytest.mark.slow

MAIN = queue("main", default=True)
VISIBILITY_S = 1
PATIENCE_S = 20.0

# SQS bodies are XML text: no control characters below space, no surrogates.
sqs_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, exclude_categories=("Cs",)),
    min_size=1,
    max_size=40,
)
garbage = sqs_text | st.sampled_from(
    [
        "{}",
        "null",
        '{"type": "runlane.wakeup", "version": 1}',
        '{"type": "runlane.wakeup", "version": 2, "message": {}}',
        '{"type": "runlane.wakeup", "version": 1, "message": {"run_id": 7}}',
        "[" * 5_000,
    ]
)
plans = st.lists(
    st.one_of(
        st.just(("good", None)),
        st.just(("twice", None)),
        st.just(("not_found", None)),
        garbage.map(lambda body: ("garbage", body)),
    ),
    min_size=1,
    max_size=8,
)

executions: Counter[str] = Counter()


@task("fuzz.consume")
async def consume(payload: Any, ctx: Context) -> None:
    executions[ctx.run_id] += 1


@pytest.fixture
async def runtime(lane_factory: LaneFactory, environment: str) -> AsyncIterator[Runlane]:
    rl = Runlane(lane=lane_factory(), queues=[MAIN], tasks=[consume], environment=environment)
    await rl.migrate()
    async with rl:
        yield rl


def remaining_bodies(client: Any, url: str) -> list[str]:
    """Every message still in the queue (visible again after the visibility timeout)."""
    bodies: list[str] = []
    for _ in range(5):
        response = client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=30
        )
        messages = response.get("Messages", [])
        if not messages:
            break
        bodies.extend(message["Body"] for message in messages)
    return bodies


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans)
async def test_garbage_stays_for_redrive_and_good_runs_execute_exactly_once(
    runtime: Runlane,
    sqs_client: Any,
    sqs_queue_factory: Callable[..., str],
    plan: list[tuple[str, str | None]],
) -> None:
    rl = runtime
    url = sqs_queue_factory("fuzz", VisibilityTimeout=str(VISIBILITY_S))
    good: list[str] = []
    bodies: list[str] = []
    garbage_bodies: list[str] = []
    for kind, text in plan:
        if kind in ("good", "twice"):
            run = await rl.trigger(consume, None)
            good.append(run.id)
            wakeup = create_sqs_wakeup_body(DeliveryMessage(rl.environment, run.id, "main"))
            bodies.extend([wakeup] * (2 if kind == "twice" else 1))
        elif kind == "not_found":
            message = DeliveryMessage(rl.environment, f"run_{uuid.uuid4().hex}", "main")
            bodies.append(create_sqs_wakeup_body(message))
        else:
            assert text is not None
            bodies.append(text)
            garbage_bodies.append(text)
    for text in bodies:
        await asyncio.to_thread(sqs_client.send_message, QueueUrl=url, MessageBody=text)

    consumer = create_sqs_delivery_consumer(
        client=sqs_client,
        queue_url=url,
        execute_delivery=rl.execute_delivery,
        wait_time_seconds=1,
        visibility_timeout_seconds=VISIBILITY_S,
    )
    await consumer.start()
    try:
        for run_id in good:
            await wait_for_status(rl, run_id, RunStatus.SUCCEEDED, within=PATIENCE_S)
        # Duplicates and garbage come round again; give them one more visibility cycle.
        await asyncio.sleep(VISIBILITY_S + 1.5)
    finally:
        await consumer.stop()
    await consumer.closed

    assert {run_id: executions[run_id] for run_id in good} == {run_id: 1 for run_id in good}
    await asyncio.sleep(VISIBILITY_S + 0.2)
    left = await asyncio.to_thread(remaining_bodies, sqs_client, url)
    assert sorted(left) == sorted(garbage_bodies)
