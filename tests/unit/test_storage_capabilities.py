"""A storage that does not promise a capability refuses the operator call that needs
it with CAPABILITY_UNSUPPORTED, and nothing is written."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

from runlane import Context, ErrorCode, Lane, Runlane, RunlaneError, RunStatus, queue, task
from runlane.ports.storage import (
    CreatesLoneRuns,
    CreatesRunBatches,
    SettlesAndClaims,
    StorageCapabilities,
    StreamsRuns,
)
from runlane.storage.postgres import PostgresStorage
from runlane.storage.sqlite import SqliteStorage

main = queue("main", default=True)


@task(id="noop", queue=main)
def noop(payload: object, ctx: Context) -> None:
    """Does nothing."""


class PromisesNothing(SqliteStorage):
    """SQLite storage that declares none of the optional capabilities."""

    capabilities = StorageCapabilities(
        reads_run_history=False, prunes_runs=False, enforces_idempotency=False
    )


@pytest.fixture
async def rl(tmp_path: Path) -> AsyncIterator[Runlane]:
    runtime = Runlane(lane=Lane(PromisesNothing(tmp_path / "bare.db")), queues=[main], tasks=[noop])
    await runtime.migrate()
    async with runtime:
        await runtime.trigger(noop)
        yield runtime


async def _refused(call: Awaitable[object], capability: str) -> None:
    with pytest.raises(RunlaneError) as raised:
        await call
    assert raised.value.code is ErrorCode.CAPABILITY_UNSUPPORTED
    assert raised.value.meta == {"capability": capability}


async def test_listing_runs_needs_reads_run_history(rl: Runlane) -> None:
    await _refused(rl.runs.list(), "reads_run_history")


async def test_pruning_needs_prunes_runs_and_deletes_nothing(rl: Runlane) -> None:
    await _refused(rl.runs.prune(older_than="0s"), "prunes_runs")
    stats = await rl.queue_stats()
    assert sum(s.counts.get(RunStatus.QUEUED, 0) for s in stats) == 1


async def test_resetting_a_key_needs_enforces_idempotency(rl: Runlane) -> None:
    await _refused(rl.idempotency_keys.reset(noop, "k"), "enforces_idempotency")


@pytest.mark.parametrize(
    ("driver", "offered"),
    [
        (SqliteStorage, {SettlesAndClaims, CreatesRunBatches}),
        (PostgresStorage, {SettlesAndClaims, CreatesLoneRuns, StreamsRuns}),
    ],
    ids=["sqlite", "postgres"],
)
def test_the_built_in_drivers_offer_their_optional_operations(
    driver: type, offered: set[type]
) -> None:
    # The conformance suite skips an optional operation's tests on a driver without it:
    # a built-in driver that lost one must fail here, not go quietly skipped there.
    optional = {SettlesAndClaims, CreatesRunBatches, CreatesLoneRuns, StreamsRuns}
    assert {protocol for protocol in optional if issubclass(driver, protocol)} == offered
