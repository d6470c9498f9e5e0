"""The dashboard in a real headless Chromium, served by the ``runlane dashboard`` command.

An operator opens the failed runs, reads a run's error, traceback and
timeline, and retries it after signing in; finds a message its subscription
dead-lettered and replays it with a reason. Stored HTML never executes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright
from tests.e2e.dashboard_process import DashboardProcess, run_async, running_dashboard
from tests.support.chromium import chromium_executable
from tests.support.dashboard_app import (
    NEGATIVE_AMOUNT,
    PublishedOrders,
    build_runtime,
    publish_orders,
)

from runlane import Run, RunEvent, RunSourceType, RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TOKEN = "browser-op-token-41f7"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "dashboard.png"
#: Set to refresh the committed screenshot; otherwise it is taken into the test's own
#: temporary folder, so a test run leaves the checkout clean.
UPDATE_SCREENSHOT = "RUNLANE_UPDATE_SCREENSHOT"


@pytest.fixture
def browser() -> Iterator[Browser]:
    executable = chromium_executable()
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
        launched = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[DashboardProcess]:
    with running_dashboard(
        tmp_path, "--refresh", "500ms", env={"RUNLANE_DASHBOARD_TOKEN": TOKEN}
    ) as dashboard:
        yield dashboard


def _read_run(folder: Path, run_id: str) -> Run:
    async def read() -> Run:
        async with build_runtime(folder / "app.db") as rl:
            return await rl.runs.get(run_id)

    return run_async(read)


def test_an_operator_finds_a_failed_run_reads_it_and_retries_it(
    browser: Browser, served: DashboardProcess, tmp_path: Path
) -> None:
    page: Page = browser.new_page(viewport={"width": 1280, "height": 900})
    console: list[ConsoleMessage] = []
    page.on("console", lambda message: console.append(message))
    page_errors: list[object] = []
    page.on("pageerror", lambda error: page_errors.append(error))
    charge, feed = served.seeded.failed_charge, served.seeded.failed_import

    # The overview links to the failed runs; the listing holds exactly those two.
    # With JavaScript, htmx (vendored) refreshes the queue table in place.
    with page.expect_response(lambda r: r.request.headers.get("hx-request") == "true"):
        page.goto(served.url)
    assert (
        page.locator("#queues").count() == 1
        and page.locator("#queues > .scroll > table").count() == 1
    )
    page.get_by_role("link", name="2", exact=True).first.click()
    page.wait_for_url("**/runs?*status=failed*")
    listed = page.locator("table.runs tbody tr td:first-child a").all_inner_texts()
    assert sorted(listed) == sorted([charge, feed])

    # A run whose payload and error text hold an <img onerror> shows it as text only.
    page.get_by_role("link", name=charge).click()
    page.wait_for_url(f"**/runs/{charge}")
    failure = page.locator("section.failure").inner_text()
    assert "Task raised ValueError." in failure
    assert 'card declined for <img src=x onerror="window.__runlaneXss=1' in failure
    assert page.locator("img").count() == 0
    assert page.evaluate("window.__runlaneXss") is None
    assert not any("xss-executed" in message.text for message in console)
    events = page.locator("ol.timeline .event").all_inner_texts()
    assert events == ["run.created", "run.started", "run.failed"]
    assert page.get_by_role("link", name="Sign in to act").is_visible()

    # A failure stored with a traceback shows it under the error.
    page.goto(f"{served.url}runs/{feed}")
    assert "ConnectionError: feed.example unreachable" in page.locator("pre.traceback").inner_text()

    # Signing in turns the hint into buttons; Retry creates a linked run.
    page.get_by_role("link", name="Sign in", exact=True).click()
    page.get_by_label("Operator token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(served.url)
    page.goto(f"{served.url}runs/{feed}")
    shot = SCREENSHOT if os.environ.get(UPDATE_SCREENSHOT) else tmp_path / SCREENSHOT.name
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    page.goto(f"{served.url}runs/{charge}")
    page.get_by_role("button", name="Retry").click()
    page.wait_for_url(lambda url: "/runs/" in url and charge not in url)
    retried_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    assert page.get_by_role("link", name=charge).is_visible()  # the source links back

    child = _read_run(served.folder, retried_id)
    assert child.source.type is RunSourceType.MANUAL_RETRY and child.source.run_id == charge
    assert page.context.cookies()[0]["httpOnly"] is True
    assert all(TOKEN not in cookie["value"] for cookie in page.context.cookies())
    assert not page_errors
    assert [m.text for m in console if m.type == "error"] == []  # no CSP violation either
    status, stderr = served.stop()
    assert status == 0
    assert TOKEN not in stderr


def _publish_orders(folder: Path) -> PublishedOrders:
    async def publish() -> PublishedOrders:
        async with build_runtime(folder / "app.db") as rl:
            return await publish_orders(rl)

    return run_async(publish)


def _read_events(folder: Path, run_id: str) -> list[RunEvent]:
    async def read() -> list[RunEvent]:
        async with build_runtime(folder / "app.db") as rl:
            return await rl.runs.events(run_id)

    return run_async(read)


def test_an_operator_finds_a_dead_letter_and_replays_it_with_a_reason(
    browser: Browser, served: DashboardProcess
) -> None:
    page: Page = browser.new_page(viewport={"width": 1280, "height": 900})
    console: list[ConsoleMessage] = []
    page.on("console", lambda message: console.append(message))
    page_errors: list[object] = []
    page.on("pageerror", lambda error: page_errors.append(error))
    # An order with a negative amount: the ledger subscription's handler dead-letters it.
    orders = _publish_orders(served.folder)
    letter = orders.dead_letter

    # The overview counts the dead letters and links to them.
    page.goto(served.url)
    page.locator("#dead-letter-count").click()
    page.wait_for_url("**/dead-letters")
    row = page.locator("table.dead-letters tbody tr").filter(has_text=letter)
    assert f"{NEGATIVE_AMOUNT} on order 1" in row.locator("td.reason").inner_text()
    assert "key halted" in row.inner_text()
    # The other dead letter's payload holds an <img onerror>: shown as text, never run.
    assert "<img src=x onerror=" in page.locator("table.dead-letters").inner_text()
    assert page.locator("img").count() == 0
    assert page.evaluate("window.__runlaneXss") is None

    # Read-only until signed in: the detail offers a sign-in link, not buttons.
    row.get_by_role("link", name=letter).click()
    page.wait_for_url(f"**/dead-letters/{letter}")
    events = page.locator("ol.timeline .event").all_inner_texts()
    assert events == ["run.created", "run.started", "run.dead_lettered"]
    assert page.get_by_role("button", name="Replay").count() == 0
    page.get_by_role("link", name="Sign in", exact=True).click()
    page.get_by_label("Operator token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(served.url)

    # Replay with a reason: the browser lands on the delivery, queued again.
    page.goto(f"{served.url}dead-letters/{letter}")
    page.get_by_label("Replay reason").fill("amount confirmed with the customer")
    page.get_by_role("button", name="Replay").click()
    page.wait_for_url(f"**/runs/{letter}")
    assert page.locator("h1 .status").inner_text() == "queued"
    assert page.locator("ol.timeline .event").all_inner_texts()[-1] == "run.replayed"

    # Storage holds the replay and its audit trail: the reason and the dashboard as actor.
    replayed = _read_events(served.folder, letter)[-1]
    assert replayed.type.value == "run.replayed"
    assert replayed.data["reason"] == "amount confirmed with the customer"
    assert replayed.data["actor"] == "dashboard"
    assert _read_run(served.folder, letter).status is RunStatus.QUEUED
    listed = page.request.get(f"{served.url}api/dead-letters").json()["dead_letters"]
    assert [d["id"] for d in listed] == [orders.xss_dead_letter]
    assert not page_errors
    assert [m.text for m in console if m.type == "error"] == []
    status, stderr = served.stop()
    assert status == 0
    assert TOKEN not in stderr


def test_an_operator_follows_a_group_from_its_page_to_its_callback_and_its_members(
    browser: Browser, served: DashboardProcess
) -> None:
    async def make_group() -> tuple[str, str, list[str]]:
        async with build_runtime(served.folder / "app.db") as rl:
            group = await rl.trigger_group(
                "greet", [{"name": "Ada"}, {"name": "Bo"}], then=("greet", {"name": "All"})
            )
            await rl.execute_next(queues=["main"])
            assert group.callback is not None
            return group.id, group.callback.id, [run.id for run in group.runs]

    group_id, callback_id, members = run_async(make_group)
    page: Page = browser.new_page(viewport={"width": 1280, "height": 900})
    page_errors: list[object] = []
    page.on("pageerror", lambda error: page_errors.append(error))

    page.goto(f"{served.url}groups/{group_id}")
    assert "1 of 2 done" in page.locator("p.progress").inner_text()
    assert page.locator("progress").get_attribute("value") == "1"
    listed = page.locator("ul.members li a").all_inner_texts()
    assert sorted(listed) == sorted(members)

    page.get_by_role("link", name=callback_id).click()
    page.wait_for_url(f"**/runs/{callback_id}")
    dependencies = page.locator("section.relations ul.dependencies li").all_inner_texts()
    assert [line.split()[0] for line in dependencies] == members
    assert any("succeeded" in line for line in dependencies)
    assert any("queued" in line for line in dependencies)
    page.get_by_role("link", name=members[0]).click()
    page.wait_for_url(f"**/runs/{members[0]}")
    dependents = page.locator("section.relations ul.dependents li").all_inner_texts()
    assert len(dependents) == 1 and callback_id in dependents[0] and "waiting" in dependents[0]


def _paused_queues(folder: Path) -> dict[str, str | None]:
    async def read() -> dict[str, str | None]:
        async with build_runtime(folder / "app.db") as rl:
            return {q.name: q.paused_reason for q in await rl.queues.list() if q.paused}

    return run_async(read)


def test_an_operator_pauses_a_queue_from_the_overview_and_resumes_it(
    browser: Browser, served: DashboardProcess
) -> None:
    page: Page = browser.new_page(viewport={"width": 1600, "height": 900})
    page_errors: list[object] = []
    page.on("pageerror", lambda error: page_errors.append(error))
    page.goto(f"{served.url}login")
    page.get_by_label("Operator token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(served.url)

    row = page.locator("#queues tbody tr", has=page.get_by_role("link", name="reports"))
    row.get_by_label("reason").fill("partner incident")
    row.get_by_role("button", name="Pause").click()
    # The queue's own page shows the pause with its reason, and the Resume button.
    page.wait_for_url("**/queues/reports")
    assert "partner incident" in page.locator("#pause-state").inner_text()
    assert _paused_queues(served.folder) == {"reports": "partner incident"}
    page.goto(served.url)
    paused_row = page.locator("#queues tbody tr", has=page.get_by_role("link", name="reports"))
    assert paused_row.locator(".queue-state .badge").inner_text() == "paused"

    paused_row.get_by_role("button", name="Resume").click()
    page.wait_for_url("**/queues/reports")
    assert _paused_queues(served.folder) == {}
    assert page.locator("#pause-state .badge").count() == 0
    assert not page_errors
