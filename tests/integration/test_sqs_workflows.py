"""Groups and chains on an SQS lane (Ministack): their due runs' wakeups are published
right after commit, before ``trigger_group`` / ``trigger_chain`` return, as
``trigger_many``'s are; on each storage driver."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from runlane import Lane, Runlane, RunStatus, postgres_lane, queue, sqlite_lane, task
from runlane.ports.wakeup_envelope import parse_wakeup_body
from runlane.sqs import sqs_queue, sqs_transport

pytest_plugins = ["tests.support.ministack"]

MAIN = queue("main", default=True)
#: A bounded queue: its runs ask for no wakeup when created; tick reserves capacity.
SERIAL = queue("serial", concurrency_limit=1)
QueueFactory = Callable[..., str]


@task("workflows.step")
async def step(payload: Any) -> Any:
    return payload


@task("workflows.serial_step", queue=SERIAL)
async def serial_step(payload: Any) -> Any:
    return payload


@task("workflows.report")
async def report(payload: Any) -> Any:
    return payload


def waiting_run_ids(sqs_client: Any, url: str) -> list[str]:
    """The run ids of the wakeups on the queue now (received and deleted)."""
    ids: list[str] = []
    while True:
        messages = sqs_client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])
        if not messages:
            return ids
        ids.extend(parse_wakeup_body(message["Body"]).run_id for message in messages)
        sqs_client.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )


@pytest.fixture
def lane(
    driver: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    sqs_client: Any,
    sqs_queue_factory: QueueFactory,
) -> tuple[Lane, dict[str, str]]:
    """A lane of ``driver`` whose queues are SQS queues; and their URLs by queue name."""
    urls = {q.name: sqs_queue_factory(f"workflows-{q.name}") for q in (MAIN, SERIAL)}
    transport = sqs_transport(
        client=sqs_client,
        queues=[sqs_queue(q, queue_url=urls[q.name]) for q in (MAIN, SERIAL)],
    )
    if driver == "sqlite":
        return sqlite_lane(tmp_path / "runlane.db", transport=transport), urls
    dsn = request.getfixturevalue("postgres_dsn")
    return postgres_lane(dsn, transport=transport), urls


@asynccontextmanager
async def runtime(lane: Lane, environment: str) -> AsyncIterator[Runlane]:
    rl = Runlane(
        lane=lane, queues=[MAIN, SERIAL], tasks=[step, serial_step, report], environment=environment
    )
    await rl.migrate()
    async with rl:
        yield rl


async def test_a_groups_members_are_woken_before_trigger_group_returns(
    lane: tuple[Lane, dict[str, str]], sqs_client: Any, environment: str
) -> None:
    built, urls = lane
    async with runtime(built, environment) as rl:
        group = await rl.trigger_group(step, [1, 2, 3], then=(report, None))
        woken = waiting_run_ids(sqs_client, urls["main"])
        assert sorted(woken) == sorted(run.id for run in group.runs), "no tick was needed"
        assert group.callback is not None
        assert (await rl.runs.get(group.callback.id)).status is RunStatus.WAITING
        # Published once: tick finds nothing left to publish.
        assert (await rl.tick()).outbox_published == 0
        assert waiting_run_ids(sqs_client, urls["main"]) == []


async def test_a_chains_first_run_is_woken_before_trigger_chain_returns(
    lane: tuple[Lane, dict[str, str]], sqs_client: Any, environment: str
) -> None:
    built, urls = lane
    async with runtime(built, environment) as rl:
        first, second = await rl.trigger_chain([(step, 1), (step, 2)])
        assert waiting_run_ids(sqs_client, urls["main"]) == [first.id]
        assert second.status is RunStatus.WAITING
        assert (await rl.tick()).outbox_published == 0


async def test_a_group_on_a_bounded_queue_is_woken_by_tick_within_its_capacity(
    lane: tuple[Lane, dict[str, str]], sqs_client: Any, environment: str
) -> None:
    built, urls = lane
    async with runtime(built, environment) as rl:
        group = await rl.trigger_group(serial_step, [1, 2, 3])
        # As trigger_many's: a bounded queue's runs are woken by tick, within capacity.
        assert waiting_run_ids(sqs_client, urls["serial"]) == []
        assert (await rl.tick()).outbox_published == 1
        (woken,) = waiting_run_ids(sqs_client, urls["serial"])
        assert woken in {run.id for run in group.runs}
