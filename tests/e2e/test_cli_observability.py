"""What operators see from the CLI: tracebacks, JSON logs, quiet drains and /metrics."""

from __future__ import annotations

import json
import re
import signal
import textwrap
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.runner import COMMAND_TIMEOUT, Cli

APP = "app:rl"


def trigger(cli: Cli, task_id: str, payload: str = "{}") -> str:
    run_id: str = cli.json("trigger", APP, task_id, "--payload", payload)["id"]
    return run_id


def test_a_failed_run_shows_its_traceback_in_show_and_events(cli: Cli) -> None:
    cli.run("migrate", APP)
    run_id = trigger(cli, "explode")
    cli.run("worker", APP, "--drain", "--quiet")

    shown = cli.json("runs", "show", APP, run_id)
    trace = shown["failure"]["meta"]["traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert 'app.py", line' in trace and trace.rstrip().endswith("ValueError: boom")
    table = cli.run("runs", "show", APP, run_id).stdout
    assert "traceback" in table and "ValueError: boom" in table
    assert "Traceback (most recent call last):" in table  # as text, not escaped JSON
    events = cli.run("runs", "events", APP, run_id).stdout
    assert "run.failed" in events and "ValueError: boom" in events
    (failed,) = [e for e in cli.json("runs", "events", APP, run_id) if e["type"] == "run.failed"]
    assert failed["data"]["failure"]["meta"]["traceback"] == trace


def test_json_log_format_makes_every_stderr_line_one_json_object(cli: Cli) -> None:
    cli.run("migrate", APP)
    failing = trigger(cli, "explode")
    greeted = trigger(cli, "greet", '{"name": "Ada"}')
    done = cli.run("--log-level", "info", "--log-format", "json", "worker", APP, "--drain")

    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert records and all({"ts", "level", "logger", "message"} <= r.keys() for r in records)
    (failed,) = [r for r in records if r.get("event") == "run.failed"]
    assert failed["level"] == "WARNING" and failed["run_id"] == failing
    assert failed["task_id"] == "explode" and failed["queue"] == "main"
    assert failed["attempt"] == 1 and failed["outcome"] == "failed"
    assert failed["error_type"] == "ValueError" and failed["error_code"] == "task_failed"
    assert failed["duration"] >= 0 and "ValueError: boom" in failed["exc_info"]
    notices = [r["message"] for r in records if r["logger"] == "runlane.cli"]
    assert any(n.startswith("worker ") and "draining" in n for n in notices)
    assert "worker stopped after 2 attempts." in notices
    # The live lines on stdout are unchanged.
    assert greeted in done.stdout and failing in done.stdout

    missing = cli.run("--log-format", "json", "runs", "show", APP, "nope", expect=1)
    (error,) = [json.loads(line) for line in missing.stderr.splitlines()]
    assert error["level"] == "ERROR" and error["error_code"] == "run_not_found"
    usage = cli.run("--log-format", "json", "worker", APP, "--concurrency", "0", expect=2)
    (problem,) = [json.loads(line) for line in usage.stderr.splitlines()]
    assert problem["level"] == "ERROR" and "--concurrency" in problem["message"]


def test_quiet_drain_prints_no_line_per_run(cli: Cli) -> None:
    cli.run("migrate", APP)
    for _ in range(3):
        trigger(cli, "greet", '{"name": "Ada"}')
    quiet = cli.run("worker", APP, "--drain", "--quiet")
    assert quiet.stdout == ""
    assert "worker stopped after 3 attempts." in quiet.stderr


RELEASING_APP = textwrap.dedent(
    """
    from runlane import Runlane, queue, sqlite_lane, task

    @task("throttled")
    async def throttled(payload, ctx):
        return ctx.release("1h", reason="rate limited by the API")

    rl = Runlane(lane=sqlite_lane("rel.db"), queues=[queue("main", default=True)],
                 tasks=[throttled])
    """
)


def test_the_worker_line_of_a_release_shows_its_reason_and_delay(cli: Cli) -> None:
    (cli.cwd / "rel_app.py").write_text(RELEASING_APP)
    cli.run("migrate", "rel_app:rl")
    cli.run("trigger", "rel_app:rl", "throttled")
    done = cli.run("worker", "rel_app:rl", "--drain")
    assert "released (rate limited by the API, again in 3600s)" in done.stdout
    again = cli.json("trigger", "rel_app:rl", "throttled")
    lines = cli.run("worker", "rel_app:rl", "--drain", "--json").stdout.splitlines()
    (settled,) = [json.loads(x) for x in lines]
    assert settled["id"] == again["id"] and settled["status"] == "released"
    assert settled["release_reason"] == "rate limited by the API"


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_worker_serves_process_metrics_that_move_as_it_works(cli: Cli) -> None:
    cli.run("migrate", APP)
    working = cli.popen("worker", APP, "--concurrency", "3", "--metrics-port", "0", "--quiet")
    try:
        assert working.stderr is not None
        url = None
        while url is None:
            line = working.stderr.readline()
            assert line, f"the worker exited before serving metrics: {working.communicate()}"
            found = re.search(r"metrics: (http://127\.0\.0\.1:\d+/metrics)", line)
            url = found.group(1) if found else None
        # The URL is printed as the server starts, before the worker reports its
        # slots: wait for that report rather than reading the first scrape.
        slots = ("runlane_worker_slots", frozenset())
        deadline = time.monotonic() + 30
        first = scrape(url)
        while first.get(slots, 0) != 3:
            assert working.poll() is None, f"the worker exited early: {working.communicate()}"
            assert time.monotonic() < deadline, f"slots never reported: {first.get(slots)}"
            time.sleep(0.05)
            first = scrape(url)
        greet = frozenset({("queue", "main"), ("task", "greet")})
        assert first.get(("runlane_runs_succeeded_total", greet), 0) == 0
        for _ in range(2):
            trigger(cli, "greet", '{"name": "Ada"}')
        deadline = time.monotonic() + 30
        while scrape(url).get(("runlane_runs_succeeded_total", greet), 0) < 2:
            assert working.poll() is None, f"the worker exited early: {working.communicate()}"
            assert time.monotonic() < deadline, "the counter never moved"
            time.sleep(0.2)
        final = scrape(url)
        assert final[("runlane_attempts_started_total", greet)] == 2
        duration = frozenset({*greet, ("outcome", "succeeded")})
        assert final[("runlane_attempt_duration_seconds_count", duration)] == 2
        # prometheus_client's own process metrics come with the default registry.
        assert any(name.startswith("python_") for name, _ in final)
    finally:
        working.send_signal(signal.SIGINT)
        working.communicate(timeout=COMMAND_TIMEOUT)
    assert working.returncode == 0


def test_tick_every_serves_metrics_and_a_single_pass_refuses_a_port(cli: Cli) -> None:
    cli.run("migrate", APP)
    refused = cli.run("tick", APP, "--metrics-port", "0", expect=2)
    assert "needs --every" in refused.stderr
    ticking = cli.popen("tick", APP, "--every", "100ms", "--metrics-port", "0")
    try:
        assert ticking.stderr is not None
        url = None
        while url is None:
            line = ticking.stderr.readline()
            assert line, f"tick exited before serving metrics: {ticking.communicate()}"
            found = re.search(r"metrics: (http://127\.0\.0\.1:\d+/metrics)", line)
            url = found.group(1) if found else None
        samples = scrape(url)
        info = [labels for name, labels in samples if name == "runlane_info"]
        assert [dict(labels)["environment"] for labels in info] == ["default"]
    finally:
        ticking.send_signal(signal.SIGTERM)
        ticking.communicate(timeout=COMMAND_TIMEOUT)
    assert ticking.returncode == 0
