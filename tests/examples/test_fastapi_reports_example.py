"""examples/fastapi/reports.py: trigger, then wait with a timeout; 202 with the run id when
the report is still running, the report when it is done."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import ModuleType

import pytest
from fastapi.testclient import TestClient
from tests.examples.conftest import example_on_path

from runlane import Runlane


@pytest.fixture
def reports() -> Iterator[ModuleType]:
    with example_on_path("fastapi", REPORTS_WAIT="1s"):
        import reports

        yield reports


@pytest.fixture
def runlane_app(reports: ModuleType) -> Runlane:
    runtime: Runlane = reports.rl
    return runtime


def test_a_quick_report_is_answered_with_its_result(
    reports: ModuleType, runlane_runtime: Runlane
) -> None:
    with TestClient(reports.create_app(in_process_worker=True)) as client:
        answer = client.post("/reports", json={"account_id": "acme"})

    assert answer.status_code == 200
    body = answer.json()
    assert body["status"] == "succeeded"
    assert body["report"] == {"account_id": "acme", "pdf": f"/files/{body['run_id']}.pdf"}


def test_a_slow_report_is_answered_202_with_its_run_id_and_shows_its_progress(
    reports: ModuleType, runlane_runtime: Runlane
) -> None:
    with TestClient(reports.create_app(in_process_worker=True)) as client:
        started = time.monotonic()
        answer = client.post(
            "/reports", json={"account_id": "acme", "pages": 4, "seconds_per_page": 0.6}
        )
        waited = time.monotonic() - started
        assert answer.status_code == 202
        assert 1.0 <= waited < 2.5  # the 1 s wait, and one re-read at most
        run_id = answer.json()["run_id"]
        deadline = time.monotonic() + 10
        while (shown := client.get(f"/reports/{run_id}").json())["status"] != "succeeded":
            assert time.monotonic() < deadline
            time.sleep(0.1)

    assert shown["progress"] == {"fraction": 1.0, "message": "page 4 of 4"}
    assert shown["report"]["account_id"] == "acme"


def test_an_unknown_report_is_404(reports: ModuleType, runlane_runtime: Runlane) -> None:
    with TestClient(reports.create_app(in_process_worker=False)) as client:
        missing = client.get("/reports/no-such-run")
    assert missing.status_code == 404 and missing.json()["code"] == "run_not_found"
