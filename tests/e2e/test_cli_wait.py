"""``runlane runs wait`` (exit 0 succeeded, 1 failed or cancelled, 3 still running) and
the progress that ``runs show`` and ``runs list`` print."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from tests.e2e.runner import Cli

APP = "observed:rl"

OBSERVED_APP = textwrap.dedent(
    """
    from runlane import RetryPolicy, Runlane, queue, sqlite_lane, task

    main = queue("main", default=True)


    @task("pages")
    async def pages(payload, ctx):
        for page in range(1, 11):
            await ctx.progress(page / 10, message=f"page {page} of 10", data={"page": page})
        return {"pages": 10}


    @task("explode", retry=RetryPolicy(max_attempts=1))
    def explode(payload, ctx):
        raise ValueError("boom")


    rl = Runlane(lane=sqlite_lane("observed.db"), queues=[main], tasks=[pages, explode])
    """
)


@pytest.fixture
def observed(tmp_path: Path) -> Cli:
    """``runlane`` in a folder holding an app whose task reports progress."""
    (tmp_path / "observed.py").write_text(OBSERVED_APP)
    return Cli(tmp_path)


def _trigger(cli: Cli, task_id: str, *options: str) -> str:
    return str(cli.json("trigger", APP, task_id, *options)["id"])


def test_wait_returns_when_a_worker_process_finishes_the_run_and_prints_the_show_view(
    observed: Cli,
) -> None:
    run_id = _trigger(observed, "pages")
    waiting = observed.popen("runs", "wait", APP, run_id, "--timeout", "60s", "--json")
    try:
        observed.run("worker", APP, "--drain", "--concurrency", "2")
        stdout, stderr = waiting.communicate(timeout=30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, stderr
    waited = json.loads(stdout)
    assert waited == observed.json("runs", "show", APP, run_id)
    assert waited["status"] == "succeeded"
    assert waited["progress"] == {
        "fraction": 1.0,
        "message": "page 10 of 10",
        "data": {"page": 10},
        "attempt": 1,
        "updated_at": waited["progress"]["updated_at"],
    }
    assert waited["progress"]["updated_at"] <= waited["updated_at"]


def test_wait_exits_1_for_a_failed_or_cancelled_run(observed: Cli) -> None:
    failing = _trigger(observed, "explode")
    observed.run("worker", APP, "--drain")
    failed = observed.run("runs", "wait", APP, failing, expect=1)
    assert "failed" in failed.stdout
    later = _trigger(observed, "pages", "--delay", "1h")
    observed.run("runs", "cancel", APP, later)
    cancelled = observed.run("runs", "wait", APP, later, "--json", expect=1)
    assert json.loads(cancelled.stdout)["status"] == "cancelled"


def test_wait_exits_3_past_its_timeout_and_prints_the_run_as_it_is(observed: Cli) -> None:
    run_id = _trigger(observed, "pages", "--delay", "1h")
    started = time.monotonic()
    timed_out = observed.run("runs", "wait", APP, run_id, "--timeout", "500ms", "--json", expect=3)
    assert time.monotonic() - started < 30  # interpreter start-up included
    assert json.loads(timed_out.stdout)["status"] == "scheduled"
    human = observed.run("runs", "wait", APP, run_id, "--timeout", "0.2", expect=3)
    assert f"run {run_id} is still scheduled after 0.2." in human.stderr


def test_wait_for_an_unknown_run_or_with_a_bad_timeout_says_what_is_wrong(observed: Cli) -> None:
    missing = observed.run("runs", "wait", APP, "no-such-run", expect=1)
    assert missing.stderr.startswith("error[run_not_found]: ")
    run_id = _trigger(observed, "pages")
    for bad in ("-5s", "soon"):
        refused = observed.run("runs", "wait", APP, run_id, "--timeout", bad, expect=2)
        assert "--timeout" in refused.stderr
    assert observed.json("runs", "show", APP, run_id)["status"] == "queued"


def test_runs_show_and_list_print_the_progress(observed: Cli) -> None:
    run_id = _trigger(observed, "pages")
    assert observed.json("runs", "show", APP, run_id)["progress"] is None
    observed.run("worker", APP, "--drain")
    shown = observed.run("runs", "show", APP, run_id).stdout
    assert "100% page 10 of 10 (attempt 1," in shown
    assert '{"page":10}' in shown
    listed = observed.run("runs", "list", APP).stdout
    assert "100% page 10 of 10" in listed
    (row,) = observed.json("runs", "list", APP)["runs"]
    assert row["progress"]["message"] == "page 10 of 10"


def test_wait_without_a_timeout_hears_a_worker_process_finish_the_run(observed: Cli) -> None:
    run_id = _trigger(observed, "pages")
    worker = observed.popen("worker", APP)
    try:
        waited = observed.run("runs", "wait", APP, run_id, "--timeout", "none", "--json")
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert json.loads(waited.stdout)["status"] == "succeeded"
