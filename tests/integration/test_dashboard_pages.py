"""The dashboard's pages and their JSON twins, served over a seeded SQLite app."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.dashboard_app import TRACEBACK_TAIL, XSS_PAYLOAD
from tests.support.dashboard_client import DashboardUnderTest, dashboard_under_test

from runlane import ErrorCode, RunlaneError, RunStatus
from runlane.dashboard import create_app
from runlane.dashboard.headers import CONTENT_SECURITY_POLICY
from runlane.operator import RUN_ROW_FIELDS


@pytest.fixture
def dash(tmp_path: Path) -> Iterator[DashboardUnderTest]:
    with dashboard_under_test(tmp_path) as under_test:
        yield under_test


def _run_links(html: str) -> list[str]:
    return re.findall(r'href="/runs/([^"/?]+)"', html)


def test_the_overview_shows_every_queue_with_counts_due_and_failures(
    dash: DashboardUnderTest,
) -> None:
    page = dash.client.get("/")
    data = dash.client.get("/api/overview").json()

    assert page.status_code == 200
    queues = {q["queue"]: q for q in data["queues"]}
    assert set(queues) == {"main", "reports"}
    assert queues["main"]["counts"] == {
        **{status.value: 0 for status in RunStatus},
        "succeeded": 3,
        "failed": 2,
    }
    assert (queues["reports"]["waiting"], queues["reports"]["due"]) == (2, 2)
    assert queues["reports"]["oldest_due_at"] is not None
    assert queues["reports"]["concurrency_limit"] == 2
    assert [p["concurrency_key"] for p in queues["reports"]["partitions"]] == [None]
    assert data["totals"]["failed"] == 2 and data["read_only"] is True
    finished = {"succeeded": 3, "failed": 2, "cancelled": 0}
    assert queues["main"]["throughput"] == {"5m": finished, "1h": finished}
    assert queues["reports"]["throughput"]["1h"] == {"succeeded": 0, "failed": 0, "cancelled": 0}
    assert 'href="/runs?queue=main&amp;status=failed">2</a>' in page.text
    assert data["environment"] in page.text


def test_the_runs_page_filters_by_status_task_and_queue(dash: DashboardUnderTest) -> None:
    failed = dash.client.get("/api/runs", params={"status": "failed"}).json()
    by_task = dash.client.get("/api/runs", params=[("task", "greet"), ("task", "charge")]).json()
    by_queue = dash.client.get("/api/runs", params={"queue": "reports"}).json()
    page = dash.client.get("/runs", params={"status": "failed"})

    assert {r["id"] for r in failed["runs"]} == {
        dash.seeded.failed_charge,
        dash.seeded.failed_import,
    }
    assert all(set(row) == set(RUN_ROW_FIELDS) for row in failed["runs"])
    assert {r["task_id"] for r in by_task["runs"]} == {"greet", "charge"}
    assert len(by_task["runs"]) == 4
    assert {r["id"] for r in by_queue["runs"]} == set(dash.seeded.reports)
    assert set(_run_links(page.text)) == {dash.seeded.failed_charge, dash.seeded.failed_import}
    assert 'value="failed" checked' in page.text


def test_the_runs_page_pages_with_a_cursor_that_keeps_the_filters(
    dash: DashboardUnderTest,
) -> None:
    first = dash.client.get("/runs", params={"queue": "main", "limit": "2"})
    next_link = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert next_link is not None
    second = dash.client.get(next_link.group(1).replace("&amp;", "&"))
    api_first = dash.client.get("/api/runs", params={"queue": "main", "limit": 2}).json()
    api_second = dash.client.get(
        "/api/runs", params={"queue": "main", "limit": 2, "cursor": api_first["next_cursor"]}
    ).json()

    assert "queue=main" in next_link.group(1) and "cursor=" in next_link.group(1)
    assert _run_links(first.text) == [r["id"] for r in api_first["runs"]]
    assert _run_links(second.text) == [r["id"] for r in api_second["runs"]]
    seen = [r["id"] for r in api_first["runs"] + api_second["runs"]]
    assert len(set(seen)) == 4
    last = dash.client.get(
        "/api/runs", params={"queue": "main", "limit": 2, "cursor": api_second["next_cursor"]}
    ).json()
    assert len(last["runs"]) == 1 and last["next_cursor"] is None


@pytest.mark.parametrize(
    "query",
    [{"status": "exploded"}, {"limit": "0"}, {"limit": "many"}, {"cursor": "abc"}],
)
def test_a_bad_filter_limit_or_cursor_is_a_400_with_the_operator_message(
    dash: DashboardUnderTest, query: dict[str, str]
) -> None:
    api = dash.client.get("/api/runs", params=query)
    page = dash.client.get("/runs", params=query)

    assert api.status_code == 400
    error = api.json()["error"]
    assert error["code"] == ErrorCode.CONFIGURATION_INVALID.value and error["message"]
    assert page.status_code == 400
    assert 'role="alert"' in page.text


def test_run_detail_shows_the_error_traceback_and_the_timeline_oldest_first(
    dash: DashboardUnderTest,
) -> None:
    run_id = dash.seeded.failed_import
    page = dash.client.get(f"/runs/{run_id}")
    data = dash.client.get(f"/api/runs/{run_id}").json()

    assert page.status_code == 200
    assert data["run"]["id"] == run_id and data["run"]["status"] == "failed"
    assert [e["type"] for e in data["events"]] == ["run.created", "run.started", "run.failed"]
    assert data["run"]["priority"] == 0 and "<dt>priority</dt><dd>0</dd>" in page.text
    assert "feed.example unreachable" in page.text and "ConnectionError" in page.text
    shown_traceback = re.search(r'<pre class="traceback">(.*?)</pre>', page.text, re.S)
    assert shown_traceback is not None
    shown = shown_traceback.group(1).replace("&#34;", '"')
    assert shown.startswith("Traceback (most recent call last):")
    assert "in fetch_feed" in shown and shown.rstrip().endswith(TRACEBACK_TAIL)
    types = re.findall(r'<span class="event">([^<]+)</span>', page.text)
    assert types == ["run.created", "run.started", "run.failed"]


def test_stored_html_is_escaped_everywhere_it_is_shown(dash: DashboardUnderTest) -> None:
    run_id = dash.seeded.failed_charge
    pages = [dash.client.get(f"/runs/{run_id}").text, dash.client.get("/runs").text]

    detail = pages[0]
    assert "<img" not in detail
    assert "&lt;img src=x onerror=" in detail
    assert "card declined for &lt;img" in detail  # the exception text, escaped too
    assert dash.client.get(f"/api/runs/{run_id}").json()["run"]["payload"] == {
        "customer": XSS_PAYLOAD
    }
    assert all('onerror="window' not in page for page in pages)


def test_an_unknown_run_is_404_as_a_page_and_as_json(dash: DashboardUnderTest) -> None:
    page = dash.client.get("/runs/no-such-run")
    api = dash.client.get("/api/runs/no-such-run")

    assert page.status_code == 404 and "does not exist" in page.text
    assert api.status_code == 404
    assert api.json()["error"]["code"] == ErrorCode.RUN_NOT_FOUND.value
    assert dash.client.get("/api/nothing-here").status_code == 404


def test_the_schedules_page_lists_each_schedule_with_its_next_fire(
    dash: DashboardUnderTest,
) -> None:
    page = dash.client.get("/schedules")
    (schedule,) = dash.client.get("/api/schedules").json()["schedules"]

    assert schedule["id"] == "reports.nightly" and schedule["kind"] == "cron"
    assert schedule["timezone"] == "Europe/Berlin" and schedule["paused"] is False
    assert schedule["next_fire_at"] is not None
    assert "reports.nightly" in page.text and "0 3 * * *" in page.text
    assert "Pause" not in page.text  # read-only: no action buttons at all


def test_every_response_carries_a_strict_content_security_policy(
    dash: DashboardUnderTest,
) -> None:
    for path in ("/", "/runs", "/api/overview", "/login", "/static/dashboard.css", "/missing"):
        response = dash.client.get(path)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY


def test_htmx_is_served_from_the_package_with_its_licence_line(dash: DashboardUnderTest) -> None:
    script = dash.client.get("/static/htmx.min.js")
    page = dash.client.get("/")

    assert script.status_code == 200
    assert (
        script.text.startswith("/*! htmx 2.") and "Zero-Clause BSD" in script.text.splitlines()[0]
    )
    assert '<script src="/static/htmx.min.js" defer></script>' in page.text
    assert "<script>" not in page.text  # no inline script anywhere


def test_hide_payloads_hides_payloads_and_results_in_html_and_json(tmp_path: Path) -> None:
    with dashboard_under_test(tmp_path, hide_payloads=True) as dash:
        greeting = dash.seeded.greetings[0]
        run = dash.client.get(f"/api/runs/{greeting}").json()["run"]
        page = dash.client.get(f"/runs/{greeting}").text

    assert run["payload"] == run["result"] == run["progress"]["data"] == "(hidden)"
    assert run["progress"]["message"] == "greeted"
    assert "Ada" not in page and "(hidden)" in page


def test_a_root_path_serves_every_page_and_link_under_the_prefix(tmp_path: Path) -> None:
    with dashboard_under_test(tmp_path, root_path="/ops/runlane") as dash:
        overview = dash.client.get("/ops/runlane/")
        runs = dash.client.get("/ops/runlane/runs")
        css = dash.client.get("/ops/runlane/static/dashboard.css")
        outside = dash.client.get("/runs")
        missing_run = dash.client.get("/ops/runlane/api/runs/nope")

    assert overview.status_code == runs.status_code == css.status_code == 200
    assert 'href="/ops/runlane/static/dashboard.css"' in overview.text
    assert 'href="/ops/runlane/runs"' in overview.text
    assert all(link for link in _run_links(runs.text)) and "/ops/runlane/runs/" in runs.text
    assert outside.status_code == 404
    assert missing_run.status_code == 404
    assert missing_run.json()["error"]["code"] == "run_not_found"


def test_healthz_answers_ok_while_storage_answers(dash: DashboardUnderTest) -> None:
    assert dash.client.get("/healthz").json() == {"ok": True}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"token": ""}, "token must be a non-empty string"),
        ({"root_path": "ops/"}, "root_path must look like"),
        ({"refresh": -1}, "refresh must be"),
    ],
)
def test_create_app_refuses_bad_options_with_a_configuration_error(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    from tests.support.dashboard_app import build_runtime

    with pytest.raises(RunlaneError) as raised:
        create_app(build_runtime(tmp_path / "app.db"), **options)  # type: ignore[arg-type]
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert message in raised.value.message


def test_healthz_and_pages_answer_503_when_storage_cannot_be_reached(tmp_path: Path) -> None:
    from starlette.testclient import TestClient
    from tests.support.dashboard_app import build_runtime

    (tmp_path / "a-file").write_text("not a folder")
    rl = build_runtime(tmp_path / "a-file" / "app.db")
    with TestClient(create_app(rl), raise_server_exceptions=False) as client:
        health = client.get("/healthz")
        api = client.get("/api/overview")
        page = client.get("/runs")

    assert health.status_code == 503 and health.json()["ok"] is False
    assert api.status_code == 503
    assert api.json()["error"]["code"] == ErrorCode.STORAGE_UNAVAILABLE.value
    assert page.status_code == 503


def test_a_group_page_shows_done_total_and_failures_and_a_run_page_its_relations(
    dash: DashboardUnderTest,
) -> None:
    async def make_group(rl: Any) -> tuple[str, str, list[str]]:
        group = await rl.trigger_group(
            "greet", [{"name": "Ada"}, {"name": "Bo"}, {"name": 7}], then=("greet", {"name": "Z"})
        )
        await rl.execute_next(queues=["main"])
        return group.id, group.callback.id, [run.id for run in group.runs]

    group_id, callback_id, members = dash.read(make_group)
    data = dash.client.get(f"/api/groups/{group_id}").json()
    page = dash.client.get(f"/groups/{group_id}")

    assert data["group"]["total"] == 3 and data["group"]["done"] == 1
    assert data["group"]["callback_id"] == callback_id
    assert sorted(row["id"] for row in data["members"]) == sorted(members)
    assert page.status_code == 200
    assert "<strong>1</strong> of <strong>3</strong> done" in page.text
    assert f'href="/runs/{callback_id}"' in page.text

    callback = dash.client.get(f"/api/runs/{callback_id}").json()
    assert [row["id"] for row in callback["dependencies"]] == members
    assert {row["status"] for row in callback["dependencies"]} == {"succeeded", "queued"}
    run_page = dash.client.get(f"/runs/{callback_id}")
    assert "Dependencies" in run_page.text and f'href="/runs/{members[0]}"' in run_page.text
    member = dash.client.get(f"/api/runs/{members[0]}").json()
    assert member["dependents"] == [{"id": callback_id, "task_id": "greet", "status": "waiting"}]
    assert dash.client.get("/api/groups/no-such-group").status_code == 404
