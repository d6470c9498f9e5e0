"""``GET /metrics``: storage gauges, scraped and parsed with prometheus_client's own parser."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient
from tests.support.dashboard_app import build_runtime, greet, main, publish_orders, reports
from tests.support.dashboard_client import DashboardUnderTest, dashboard_under_test

from runlane import (
    ErrorCode,
    Lane,
    ManualClock,
    QueueStats,
    Runlane,
    RunlaneError,
    RunStatus,
    sqlite_lane,
)
from runlane.dashboard import create_app
from runlane.metrics import StorageGaugeCollector, StorageSnapshot
from runlane.testing import drain
from runlane.transport.memory import MemoryTransport

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: TestClient) -> Samples:
    """Every sample of one scrape, by (name, sorted labels)."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def dash(tmp_path: Path) -> Iterator[DashboardUnderTest]:
    with dashboard_under_test(tmp_path) as under_test:
        yield under_test


def test_runs_by_queue_and_status_include_every_status_with_zeros(
    dash: DashboardUnderTest,
) -> None:
    samples = scrape(dash.client)

    runs = {labels: v for (name, labels), v in samples.items() if name == "runlane_runs"}
    assert len(runs) == 2 * len(RunStatus)
    assert value(samples, "runlane_runs", queue="main", status="succeeded") == 3
    assert value(samples, "runlane_runs", queue="main", status="failed") == 2
    assert value(samples, "runlane_runs", queue="main", status="queued") == 0
    assert value(samples, "runlane_runs", queue="reports", status="queued") == 2
    assert value(samples, "runlane_runs", queue="reports", status="cancelled") == 0


def test_dead_lettered_and_discarded_deliveries_have_their_own_series(
    dash: DashboardUnderTest,
) -> None:
    before = scrape(dash.client)
    orders = dash.read(publish_orders)
    dead = scrape(dash.client)
    dash.read(lambda rl: rl.dead_letters.discard(orders.dead_letter, reason="test"))
    after = scrape(dash.client)

    for queue in ("main", "reports"):
        for status in ("dead_lettered", "discarded"):
            assert value(before, "runlane_runs", queue=queue, status=status) == 0
    assert value(dead, "runlane_runs", queue="main", status="dead_lettered") == 2
    assert value(after, "runlane_runs", queue="main", status="dead_lettered") == 1
    assert value(after, "runlane_runs", queue="main", status="discarded") == 1


def test_queue_gauges_show_due_runs_their_age_capacity_and_schedules(
    dash: DashboardUnderTest,
) -> None:
    samples = scrape(dash.client)

    assert value(samples, "runlane_queue_due", queue="reports") == 2
    assert value(samples, "runlane_queue_due", queue="main") == 0
    assert value(samples, "runlane_queue_oldest_due_age_seconds", queue="reports") > 0
    assert value(samples, "runlane_queue_oldest_due_age_seconds", queue="main") == 0
    assert value(samples, "runlane_queue_limit", queue="reports") == 2
    assert value(samples, "runlane_queue_occupied", queue="reports") == 0
    assert ("runlane_queue_limit", (("queue", "main"),)) not in samples  # unbounded
    assert value(samples, "runlane_outbox_backlog", queue="main") == 0
    next_fire = value(
        samples, "runlane_schedule_next_fire_timestamp_seconds", schedule="reports.nightly"
    )
    assert next_fire > datetime.now(UTC).timestamp()


def test_the_gauges_move_after_a_drain(dash: DashboardUnderTest) -> None:
    before = scrape(dash.client)

    async def work(rl: Runlane) -> int:
        await rl.trigger(greet, {"name": "Barbara"})
        return len(await drain(rl))

    executed = dash.read(work)
    after = scrape(dash.client)

    assert executed == 3  # the two waiting reports and the new greeting
    assert value(before, "runlane_runs", queue="reports", status="queued") == 2
    assert value(after, "runlane_runs", queue="reports", status="queued") == 0
    assert value(after, "runlane_runs", queue="reports", status="succeeded") == 2
    assert value(after, "runlane_runs", queue="main", status="succeeded") == 4
    assert value(after, "runlane_queue_due", queue="reports") == 0
    assert value(after, "runlane_queue_oldest_due_age_seconds", queue="reports") == 0


def test_a_paused_queue_has_its_gauge_set_and_keeps_its_due_runs(
    dash: DashboardUnderTest,
) -> None:
    before = scrape(dash.client)

    async def pause_and_drain(rl: Runlane) -> int:
        await rl.queues.pause("reports")
        return len(await drain(rl))

    executed = dash.read(pause_and_drain)
    paused = scrape(dash.client)
    dash.read(lambda rl: rl.queues.resume("reports"))
    resumed = scrape(dash.client)

    assert value(before, "runlane_queue_paused", queue="reports") == 0
    assert executed == 0
    assert value(paused, "runlane_queue_paused", queue="reports") == 1
    assert value(paused, "runlane_queue_paused", queue="main") == 0
    assert value(paused, "runlane_queue_due", queue="reports") == 2
    assert value(resumed, "runlane_queue_paused", queue="reports") == 0


def test_the_outbox_backlog_counts_wakeups_not_yet_published(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    clock = ManualClock()
    transport = MemoryTransport([main, reports])
    transport.fail_with = RunlaneError(ErrorCode.TRANSPORT_UNAVAILABLE, "down", retryable=True)

    def producer() -> Runlane:
        lane = sqlite_lane(str(db), transport=transport)
        return Runlane(lane=lane, queues=[main, reports], tasks=[greet], clock=clock)

    async def trigger_two() -> None:
        async with producer() as rl:
            await rl.trigger(greet, {"name": "Ada"})
            await rl.trigger(greet, {"name": "Grace"})

    async def publish() -> int:
        async with producer() as rl:
            return (await rl.tick()).outbox_published

    asyncio.run(trigger_two())
    rl = build_runtime(db)
    with TestClient(create_app(rl)) as client:
        try:
            stuck = scrape(client)
            transport.fail_with = None
            clock.advance("5m")
            published = asyncio.run(publish())
            drained = scrape(client)
        finally:
            client.portal.call(rl.close)

    assert value(stuck, "runlane_outbox_backlog", queue="main") == 2
    assert value(stuck, "runlane_outbox_backlog", queue="reports") == 0
    assert published == 2
    assert value(drained, "runlane_outbox_backlog", queue="main") == 0


def test_the_overview_and_gauges_agree_on_each_storage_driver(
    tmp_path: Path, lane_factory: Callable[[], Lane], environment: str
) -> None:
    with dashboard_under_test(tmp_path, lanes=lane_factory, environment=environment) as dash:
        overview = {q["queue"]: q for q in dash.client.get("/api/overview").json()["queues"]}
        before = scrape(dash.client)
        dash.read(drain)
        after = scrape(dash.client)

    assert overview["main"]["counts"]["failed"] == 2 and overview["reports"]["due"] == 2
    for queue, entry in overview.items():
        for status, count in entry["counts"].items():
            assert value(before, "runlane_runs", queue=queue, status=status) == count
    assert value(before, "runlane_queue_due", queue="reports") == 2
    assert value(after, "runlane_queue_due", queue="reports") == 0
    assert value(after, "runlane_runs", queue="reports", status="succeeded") == 2


def test_the_rate_limited_gauge_sums_a_queues_runs_waiting_for_tokens() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    stats = [
        QueueStats("partner", "a", 1, {}, 0, due=4, rate_limited=3),
        QueueStats("partner", "b", 1, {}, 0, due=1, rate_limited=1),
        QueueStats("main", None, None, {}, 0, due=2),
    ]
    snapshot = StorageSnapshot("env", now, stats, {}, {}, {"partner": False, "main": True})
    families = {f.name: f for f in StorageGaugeCollector(snapshot).collect()}
    limited = {s.labels["queue"]: s.value for s in families["runlane_queue_rate_limited"].samples}
    paused = {s.labels["queue"]: s.value for s in families["runlane_queue_paused"].samples}
    assert limited == {"partner": 4, "main": 0}
    assert paused == {"partner": 0, "main": 1}
