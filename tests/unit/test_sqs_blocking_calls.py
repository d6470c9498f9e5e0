"""boto3 calls run off the event loop on a bounded number of threads.

Many concurrent triggers (each publishing wakeups) must not start one thread per
call: at the bound, further calls wait for a thread instead.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import boto3
import pytest

from runlane import ErrorCode, RunlaneError, queue
from runlane.sqs import create_sqs_delivery_consumer, sqs_queue, sqs_transport
from runlane.transport.sqs.provider import DEFAULT_MAX_THREADS, BlockingCalls

MAIN = queue("main", default=True)
URL = "https://sqs.us-east-1.amazonaws.com/123456789012/main"


async def test_calls_beyond_the_bound_wait_for_a_thread_and_all_complete() -> None:
    calls = BlockingCalls(max_threads=3)
    release = threading.Event()
    lock = threading.Lock()
    running = 0
    peak = 0

    def blocking(value: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(5)
        with lock:
            running -= 1
        return value * 2

    pending = [asyncio.ensure_future(calls.run(blocking, i)) for i in range(10)]
    await asyncio.sleep(0.2)
    assert calls.threads == 3
    assert peak == 3
    release.set()
    assert await asyncio.gather(*pending) == [i * 2 for i in range(10)]
    assert peak == 3
    assert calls.threads == 3


async def test_idle_threads_are_reused_and_retire_after_the_idle_timeout() -> None:
    calls = BlockingCalls(max_threads=4, idle_timeout=0.1)
    for i in range(5):
        assert await calls.run(lambda i=i: i) == i
        await asyncio.sleep(0.02)  # the thread marks itself idle just after answering
    assert calls.threads == 1
    await asyncio.sleep(0.4)
    assert calls.threads == 0


async def test_a_failing_call_raises_in_the_caller_and_frees_its_thread() -> None:
    calls = BlockingCalls(max_threads=1)

    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await calls.run(fail)
    assert await calls.run(lambda: "next") == "next"


@pytest.fixture(scope="module")
def offline_client() -> Any:
    """A real boto3 SQS client that is never called."""
    return boto3.client(
        "sqs", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )


@pytest.mark.parametrize("max_threads", [0, -1, 2.5, True, "8"])
def test_max_threads_must_be_a_whole_number_of_at_least_one(
    offline_client: Any, max_threads: Any
) -> None:
    async def execute_delivery(message: Any, **options: Any) -> Any:
        raise AssertionError("never called")

    builders = [
        lambda: sqs_transport(
            client=offline_client, queues=[sqs_queue(MAIN, queue_url=URL)], max_threads=max_threads
        ),
        lambda: create_sqs_delivery_consumer(
            client=offline_client,
            queue_url=URL,
            execute_delivery=execute_delivery,
            max_threads=max_threads,
        ),
    ]
    for build in builders:
        with pytest.raises(RunlaneError) as raised:
            build()
        assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
        assert "max_threads" in raised.value.message


def test_the_default_bound_matches_botocores_connection_pool() -> None:
    # botocore.config.Config.max_pool_connections defaults to 10 per client.
    from botocore.config import Config

    assert Config().max_pool_connections == DEFAULT_MAX_THREADS
