"""The kill -9 chaos run at a small size, on each storage driver (``bench/chaos.py``).

Worker processes drain runs while random ones are killed with SIGKILL and
replaced; afterwards no run may be lost and none recorded twice as succeeded.
Runs caught in flight execute again (delivery is at least once), which is how
the test knows the kills landed mid-attempt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

CHAOS = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"
RUNS = 200
KILLS = 3


def test_killing_workers_at_random_loses_no_run_and_doubles_no_success(
    driver: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    report = _run_chaos(
        driver,
        request,
        tmp_path,
        "--runs",
        str(RUNS),
        # Few slots, slow tasks and quick kills: the drain outlasts every kill
        # however fast or busy the machine is.
        "--workers",
        "3",
        "--concurrency",
        "2",
        "--task-seconds",
        "0.15",
        "--kills",
        str(KILLS),
        "--kill-interval",
        "0.1",
    )

    assert report["kills"] == KILLS, report
    assert report["runs_triggered"] == RUNS
    assert report["lost_runs"] == 0, report
    assert report["runs_recorded_twice_as_succeeded"] == 0, report
    assert report["succeeded_without_an_execution"] == 0, report
    assert report["runs_succeeded"] + report["runs_failed"] == RUNS, report
    assert report["runs_failed"] == 0, report
    assert report["re_executions"] > 0, "no kill caught an attempt in flight"
    assert report["executions"] == RUNS + report["re_executions"]
    assert report["exit_status"] == 0 and report["ok"] is True


def test_killing_workers_during_a_workflow_graph_strands_no_dependent_and_releases_none_twice(
    driver: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Chains and fan-ins of a few hundred runs: kills land after a member's settle,
    # between a dependency's success and its dependents' start, and mid-callback.
    report = _run_chaos(
        driver,
        request,
        tmp_path,
        "--graph",
        "--runs",
        "300",
        "--workers",
        "3",
        "--concurrency",
        "3",
        "--task-seconds",
        "0.1",
        "--kills",
        "4",
        "--kill-interval",
        "0.3",
    )
    assert report["kills"] == 4, report
    assert report["runs_triggered"] >= 300
    assert report["lost_runs"] == 0 and report["runs_left_waiting"] == 0, report
    assert report["dependents_released_twice"] == 0, report
    assert report["started_before_dependencies"] == 0, report
    assert report["runs_recorded_twice_as_succeeded"] == 0, report
    assert report["runs_succeeded"] == report["runs_triggered"], report
    assert report["re_executions"] > 0, "no kill caught an attempt in flight"
    assert report["exit_status"] == 0 and report["ok"] is True


def _run_chaos(
    driver: str, request: pytest.FixtureRequest, tmp_path: Path, *args: str
) -> dict[str, Any]:
    """Run ``bench/chaos.py`` on *driver* with *args* and return its JSON report.

    Exit status 1 means the report found a fault; the caller's assertions say which.
    """
    store = [] if driver == "sqlite" else ["--dsn", request.getfixturevalue("postgres_dsn")]
    done = subprocess.run(
        [
            sys.executable,
            str(CHAOS),
            "--driver",
            driver,
            *store,
            *args,
            "--timeout",
            "120",
            "--dir",
            str(tmp_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    report["exit_status"] = done.returncode
    return report
