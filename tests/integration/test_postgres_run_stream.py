"""The PostgreSQL run stream (``StreamsRuns``): one COPY in one transaction, all or none.

Core validates each batch only when the driver asks for it, so a failure may come
from the batches themselves after earlier ones reached the server: those must be
rolled back and the failure must reach the caller as it was raised.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from runlane import ErrorCode, RunlaneError
from runlane.ports.storage import NewRun, RunFilter, StreamsRuns
from runlane.storage.postgres import PostgresStorage
from runlane.types.runs import RunSource, RunStatus

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _batch(start: int, count: int, **options: str) -> list[NewRun]:
    return [
        NewRun(
            id=f"s{n:05d}",
            task_id="noop",
            queue="main",
            status=RunStatus.QUEUED,
            payload={"n": n},
            payload_json=f'{{"n":{n}}}',
            run_at=NOW - timedelta(seconds=1),
            source=RunSource(),
            **options,  # type: ignore[arg-type]
        )
        for n in range(start, start + count)
    ]


async def _stored(store: PostgresStorage, environment: str) -> int:
    page = await store.list_runs(environment, RunFilter(), limit=1000, cursor=None)
    return len(page.data)


async def test_the_runs_of_every_batch_are_created_in_order_as_returned(
    postgres_storage: PostgresStorage, environment: str
) -> None:
    assert isinstance(postgres_storage, StreamsRuns)
    batches = [_batch(0, 300), _batch(300, 1), _batch(301, 250)]
    runs = await postgres_storage.create_run_stream(environment, iter(batches), NOW)
    assert [run.id for run in runs] == [new.id for batch in batches for new in batch]
    for run in (runs[0], runs[300], runs[-1]):
        assert await postgres_storage.get_run(environment, run.id) == run
    assert await _stored(postgres_storage, environment) == 551


async def test_an_error_from_the_batches_propagates_and_nothing_is_written(
    postgres_storage: PostgresStorage, environment: str
) -> None:
    class Refused(Exception):
        pass

    def batches() -> Iterator[list[NewRun]]:
        yield _batch(0, 500)
        yield _batch(500, 500)
        raise Refused("the third batch holds a bad payload")

    with pytest.raises(Refused, match="third batch"):
        await postgres_storage.create_run_stream(environment, batches(), NOW)
    assert await _stored(postgres_storage, environment) == 0
    # The connection came back clean: the next write succeeds.
    assert (
        len(await postgres_storage.create_run_stream(environment, iter([_batch(0, 2)]), NOW)) == 2
    )


async def test_a_run_with_a_key_is_refused_and_nothing_is_written(
    postgres_storage: PostgresStorage, environment: str
) -> None:
    batches = [_batch(0, 100), _batch(100, 1, singleton_key="only")]
    with pytest.raises(RunlaneError) as refused:
        await postgres_storage.create_run_stream(environment, iter(batches), NOW)
    assert refused.value.code is ErrorCode.INTERNAL_ERROR
    assert await _stored(postgres_storage, environment) == 0
