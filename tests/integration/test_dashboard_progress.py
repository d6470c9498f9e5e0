"""The progress tasks report, on the dashboard's run page (a bar), its runs list, and
their JSON twins."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.dashboard_app import GREETING_PROGRESS
from tests.support.dashboard_client import DashboardUnderTest, dashboard_under_test


@pytest.fixture
def dash(tmp_path: Path) -> Iterator[DashboardUnderTest]:
    with dashboard_under_test(tmp_path) as under_test:
        yield under_test


def test_the_run_page_draws_the_last_progress_as_a_bar_and_its_twin_has_it(
    dash: DashboardUnderTest,
) -> None:
    greeting = dash.seeded.greetings[0]
    page = dash.client.get(f"/runs/{greeting}")
    data = dash.client.get(f"/api/runs/{greeting}").json()

    progress = data["run"]["progress"]
    assert progress["fraction"] == 1.0 and progress["message"] == GREETING_PROGRESS
    assert progress["data"] == {"name": "Ada"} and progress["attempt"] == 1
    bar = re.search(r'<progress class="progress" value="([^"]+)" max="1"', page.text)
    assert bar is not None and float(bar.group(1)) == 1.0
    assert f'<span class="progress-message">{GREETING_PROGRESS}</span>' in page.text
    assert "attempt 1" in page.text and "{&#34;name&#34;: &#34;Ada&#34;}" in page.text


def test_a_run_without_progress_shows_none_and_the_runs_list_shows_each_bar(
    dash: DashboardUnderTest,
) -> None:
    failed = dash.client.get(f"/api/runs/{dash.seeded.failed_charge}").json()
    assert failed["run"]["progress"] is None
    listing = dash.client.get("/runs", params={"task": "greet"})
    rows = dash.client.get("/api/runs", params={"task": "greet"}).json()["runs"]

    assert [row["progress"]["fraction"] for row in rows] == [1.0, 1.0, 1.0]
    assert listing.text.count('<progress class="progress" value="1.0"') == 3
    charges = dash.client.get("/runs", params={"task": "charge"})
    assert "<progress" not in charges.text


def test_hide_payloads_hides_progress_data_in_rows_too(tmp_path: Path) -> None:
    with dashboard_under_test(tmp_path, hide_payloads=True) as dash:
        rows = dash.client.get("/api/runs", params={"task": "greet"}).json()["runs"]
        listing = dash.client.get("/runs", params={"task": "greet"}).text

    assert [row["progress"]["data"] for row in rows] == ["(hidden)"] * 3
    assert [row["progress"]["message"] for row in rows] == [GREETING_PROGRESS] * 3
    assert "Ada" not in listing
