"""examples/fastapi: the lifespan opens the runtime, an endpoint triggers, a worker may run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient
from tests.examples.conftest import example_on_path, run_in_example

from runlane import Runlane, RunStatus
from runlane.testing.sync import assert_triggered

#: Real seconds the in-process worker gets to finish a run.
WITHIN = 10.0


@pytest.fixture
def signups() -> Iterator[ModuleType]:
    with example_on_path("fastapi"):
        import signups

        yield signups


@pytest.fixture
def runlane_app(signups: ModuleType) -> Runlane:
    """The plugin's runlane_runtime puts the app's runtime on a throwaway SQLite file."""
    runtime: Runlane = signups.rl
    return runtime


def test_a_signup_triggers_a_welcome_run(signups: ModuleType, runlane_runtime: Runlane) -> None:
    with TestClient(signups.create_app(in_process_worker=False)) as client:
        response = client.post("/signups", json={"email": "ada@example.com"})

        assert response.status_code == 202
        (run,) = assert_triggered(
            runlane_runtime, signups.send_welcome, payload={"email": "ada@example.com"}
        )
        assert run.id == response.json()["run_id"]
        assert client.get(f"/runs/{run.id}").json() == {"status": "queued", "result": None}


def test_the_in_process_worker_executes_the_run(
    signups: ModuleType, runlane_runtime: Runlane
) -> None:
    with TestClient(signups.create_app(in_process_worker=True)) as client:
        run_id = client.post("/signups", json={"email": "bo@example.com"}).json()["run_id"]

        deadline = time.monotonic() + WITHIN
        while (shown := client.get(f"/runs/{run_id}").json())["status"] != "succeeded":
            assert time.monotonic() < deadline, f"run still {shown['status']} after {WITHIN}s"
            time.sleep(0.05)

    assert shown["result"] == {"sent_to": "bo@example.com"}
    assert not runlane_runtime.is_open  # the lifespan closed it, after stopping the worker
    assert_triggered(runlane_runtime, signups.send_welcome, status=RunStatus.SUCCEEDED, count=1)


def test_an_unknown_run_is_a_404_with_its_error_code(
    signups: ModuleType, runlane_runtime: Runlane
) -> None:
    with TestClient(signups.create_app(in_process_worker=False)) as client:
        response = client.get("/runs/nope")

    assert response.status_code == 404
    assert response.json()["code"] == "run_not_found"


def test_workers_of_their_own_run_what_the_api_triggered(tmp_path: Path) -> None:
    environ = {"RUNLANE_DB": str(tmp_path / "signups.db"), "SIGNUPS_WORKER": "0"}
    with example_on_path("fastapi", **environ) as folder:
        import signups

        with TestClient(signups.app) as client:
            run_id = client.post("/signups", json={"email": "cy@example.com"}).json()["run_id"]

        run_in_example(folder, "-m", "runlane", "worker", "signups:rl", "--drain", env=environ)

        with TestClient(signups.app) as client:
            shown = client.get(f"/runs/{run_id}").json()
    assert shown == {"status": "succeeded", "result": {"sent_to": "cy@example.com"}}
