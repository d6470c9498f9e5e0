"""examples/flask: a sync app triggers through rl.sync; its test moves the clock to drain."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from types import ModuleType

import pytest
from tests.examples.conftest import example_on_path

from runlane import ManualClock, Runlane, RunStatus
from runlane.testing.sync import assert_triggered, drain


@pytest.fixture
def feedback() -> Iterator[ModuleType]:
    with example_on_path("flask"):
        import feedback

        yield feedback


@pytest.fixture
def runlane_app(feedback: ModuleType) -> Runlane:
    runtime: Runlane = feedback.rl
    return runtime


def test_feedback_schedules_one_thank_you_an_hour_later(
    feedback: ModuleType, runlane_runtime: Runlane, runlane_clock: ManualClock
) -> None:
    client = feedback.app.test_client()

    first = client.post("/feedback", data={"email": "ada@example.com"})
    again = client.post("/feedback", data={"email": "ada@example.com"})

    assert first.status_code == 202 and again.json == first.json  # one run per address
    (run,) = assert_triggered(
        runlane_runtime,
        feedback.thank_customer,
        payload={"email": "ada@example.com"},
        status=RunStatus.SCHEDULED,
        run_at=runlane_clock.now() + timedelta(hours=1),
    )
    assert client.get(f"/runs/{run.id}").json == {"status": "scheduled", "result": None}


def test_the_thank_you_goes_out_when_the_hour_has_passed(
    feedback: ModuleType, runlane_runtime: Runlane, runlane_clock: ManualClock
) -> None:
    client = feedback.app.test_client()
    run_id = client.post("/feedback", data={"email": "bo@example.com"}).json["run_id"]

    assert drain(runlane_runtime) == []  # nothing is due yet
    runlane_clock.advance("1h")
    (done,) = drain(runlane_runtime)

    assert done.id == run_id and done.result == {"thanked": "bo@example.com"}
    assert client.get(f"/runs/{run_id}").json["status"] == "succeeded"


def test_an_unknown_run_is_a_404_with_its_error_code(
    feedback: ModuleType, runlane_runtime: Runlane
) -> None:
    response = feedback.app.test_client().get("/runs/nope")

    assert response.status_code == 404 and response.json["code"] == "run_not_found"
