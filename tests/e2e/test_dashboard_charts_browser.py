"""The throughput charts in a real headless Chromium: the overview and a queue page draw
their SVG charts, and the bars add up to the runs storage holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page
from tests.e2e.dashboard_process import DashboardProcess, run_async
from tests.e2e.test_dashboard_browser import UPDATE_SCREENSHOT, browser, served
from tests.support.dashboard_app import build_runtime

from runlane import RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "dashboard-overview.png"
OUTCOMES = ("succeeded", "failed", "retried", "cancelled")

__all__ = ["browser", "served"]


def _stored_counts(folder: Path) -> dict[str, int]:
    async def count() -> dict[str, int]:
        async with build_runtime(folder / "app.db") as rl:
            runs = (await rl.runs.list(limit=1000)).data
        return {s.value: sum(r.status is s for r in runs) for s in RunStatus}

    return run_async(count)


def _drawn(page: Page) -> dict[str, int]:
    """What the finished chart's bars hold, summed, as the browser sees the page."""
    totals: dict[str, int] = page.evaluate(
        """(names) => {
            const sums = Object.fromEntries(names.map((n) => [n, 0]));
            for (const bar of document.querySelectorAll("svg.chart-finished g.bar")) {
                for (const n of names) sums[n] += Number(bar.dataset[n]);
            }
            return sums;
        }""",
        list(OUTCOMES),
    )
    return totals


def test_the_charts_render_and_add_up_to_the_stored_runs(
    browser: Browser, served: DashboardProcess, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    errors: list[object] = []
    page.on("pageerror", lambda error: errors.append(error))
    stored = _stored_counts(served.folder)

    page.goto(served.url)
    finished = page.locator("svg.chart-finished")
    latency = page.locator("svg.chart-latency")
    assert finished.count() == latency.count() == 1
    box = finished.bounding_box()
    assert box is not None and box["width"] > 500 and box["height"] > 80
    assert page.locator("svg.chart-finished g.bar").count() == 60
    assert page.locator("svg.chart-finished rect.bar-succeeded").first.is_visible()
    assert page.locator("svg.chart-latency circle.dot-p95").count() >= 1
    drawn = _drawn(page)
    assert drawn == {
        "succeeded": stored["succeeded"],
        "failed": stored["failed"],
        "retried": 0,
        "cancelled": stored["cancelled"],
    }
    assert drawn["succeeded"] == 3 and drawn["failed"] == 2
    legend = page.locator('#throughput .legend .total[data-series="succeeded"]').inner_text()
    assert legend == "3"
    shot = SCREENSHOT if os.environ.get(UPDATE_SCREENSHOT) else tmp_path / SCREENSHOT.name
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    # The queue's own page: its limits, its pause state, and its charts by day.
    page.get_by_role("link", name="main", exact=True).first.click()
    page.wait_for_url("**/queues/main")
    assert page.locator("#pause-state").inner_text().startswith("no")
    assert page.locator("#rate-limit").inner_text() == "none"
    page.get_by_role("link", name="1d", exact=True).click()
    page.wait_for_url("**/queues/main?window=1d")
    assert page.locator("svg.chart-finished g.bar").count() == 96
    assert _drawn(page) == drawn
    assert errors == []
