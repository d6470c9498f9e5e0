"""Throughput charts on the overview and the queue pages: server-rendered SVG whose
bars hold what storage counted, and their JSON twins."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.dashboard_client import DashboardUnderTest, dashboard_under_test

OUTCOMES = ("succeeded", "failed", "retried", "cancelled")


@pytest.fixture
def dash(tmp_path: Path) -> Iterator[DashboardUnderTest]:
    with dashboard_under_test(tmp_path) as under_test:
        yield under_test


def _bar_sums(html: str) -> dict[str, int]:
    bars = re.findall(r'<g class="bar" data-at="[^"]+" ([^>]*)>', html)
    sums = dict.fromkeys(OUTCOMES, 0)
    for attributes in bars:
        for name, value in re.findall(r'data-(\w+)="(\d+)"', attributes):
            sums[name] += int(value)
    return sums


def test_the_overview_draws_every_queue_s_attempts_as_stored(dash: DashboardUnderTest) -> None:
    stored = {s: len(dash.client.get("/api/runs", params={"status": s}).json()["runs"])
              for s in ("succeeded", "failed", "cancelled")}  # fmt: skip
    page = dash.client.get("/").text
    data = dash.client.get("/api/throughput", params={"window": "1h"}).json()

    assert stored == {"succeeded": 3, "failed": 2, "cancelled": 0}
    assert data["queue"] is None and data["window"] == "1h" and data["bucket_seconds"] == 60
    assert len(data["points"]) == 60
    total = {name: data["total"][name] for name in OUTCOMES}
    assert total == {**stored, "retried": 0}
    assert data["total"]["started"] == 5 and data["total"]["latency_p95_ms"] is not None
    assert page.count('<svg class="chart chart-finished"') == 1
    assert page.count('<svg class="chart chart-latency"') == 1
    assert _bar_sums(page) == total
    assert "<script" not in page.split('id="throughput"')[1]
    # htmx (when the page has it) redraws the charts in place, as it does the tables.
    assert 'hx-get="/?window=1h" hx-trigger="every 5.0s" hx-select="#throughput"' in page


def test_a_queue_page_shows_its_limit_counts_charts_and_a_place_for_pausing(
    dash: DashboardUnderTest,
) -> None:
    reports = dash.client.get("/queues/reports").text
    main_day = dash.client.get("/queues/main", params={"window": "1d"}).text
    api = dash.client.get("/api/queues/main/throughput", params={"window": "1d"}).json()

    assert "2 per concurrency key" in reports and 'id="pause-state"' in reports
    assert _bar_sums(reports) == dict.fromkeys(OUTCOMES, 0)
    assert (api["queue"], api["window"], api["bucket_seconds"]) == ("main", "1d", 900)
    assert len(api["points"]) == 96
    assert (api["total"]["succeeded"], api["total"]["failed"]) == (3, 2)
    assert _bar_sums(main_day) == {name: api["total"][name] for name in OUTCOMES}
    assert 'href="/queues/main?window=1h"' in main_day


def test_unknown_queues_and_windows_are_refused(dash: DashboardUnderTest) -> None:
    missing = dash.client.get("/api/queues/nope/throughput")
    bad_window = dash.client.get("/api/throughput", params={"window": "2h"})
    page = dash.client.get("/queues/nope")

    assert missing.status_code == page.status_code == 404
    assert missing.json()["error"]["code"] == "queue_not_found"
    assert bad_window.status_code == 400
    assert bad_window.json()["error"]["code"] == "configuration_invalid"
