"""The ``runlane`` CLI against a user's app: produce, execute, inspect and act on runs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.e2e.runner import Cli

APP = "app:rl"


def trigger(cli: Cli, task_id: str, *options: str) -> Any:
    """Trigger through the CLI and return the run as JSON."""
    return cli.json("trigger", APP, task_id, *options)


def test_trigger_creates_a_queued_run_that_runs_list_shows(cli: Cli) -> None:
    run = trigger(cli, "greet", "--payload", '{"name": "Ada"}')

    assert run["status"] == "queued"
    assert run["payload"] == {"name": "Ada"}
    listed = cli.json("runs", "list", APP)
    assert [row["id"] for row in listed["runs"]] == [run["id"]]
    assert listed["runs"][0]["status"] == "queued"
    assert listed["next_cursor"] is None


def test_worker_drain_executes_due_runs_and_show_and_events_tell_the_story(cli: Cli) -> None:
    run = trigger(cli, "greet", "--payload", '{"name": "Ada"}')

    drained = cli.run("worker", APP, "--drain", "--concurrency", "4")

    assert run["id"] in drained.stdout and "succeeded" in drained.stdout
    shown = cli.json("runs", "show", APP, run["id"])
    assert shown["status"] == "succeeded"
    assert shown["result"] == {"greeting": "hello Ada"}
    events = cli.json("runs", "events", APP, run["id"])
    assert [event["type"] for event in events] == ["run.created", "run.started", "run.succeeded"]
    table = cli.run("runs", "events", APP, run["id"]).stdout
    assert "run.succeeded" in table


def test_worker_only_claims_from_the_queues_it_is_given(cli: Cli) -> None:
    greeting = trigger(cli, "greet", "--payload", '{"name": "Ada"}')
    report = trigger(cli, "reports.render")

    cli.run("worker", APP, "--drain", "--queue", "reports")

    assert cli.json("runs", "show", APP, report["id"])["status"] == "succeeded"
    assert cli.json("runs", "show", APP, greeting["id"])["status"] == "queued"


def test_failed_run_is_retried_as_a_linked_child_and_finished_run_rerun(cli: Cli) -> None:
    failing = trigger(cli, "explode")
    fine = trigger(cli, "greet", "--payload", '{"name": "Bo"}')
    cli.run("worker", APP, "--drain")
    failed = cli.json("runs", "show", APP, failing["id"])
    assert failed["status"] == "failed"
    assert failed["failure"]["code"] == "task_failed"

    retried = cli.json("runs", "retry", APP, failing["id"])
    rerun = cli.json("runs", "rerun", APP, fine["id"])

    assert retried["source"] == {"type": "manual_retry", "run_id": failing["id"]}
    assert retried["status"] == "queued"
    assert rerun["source"] == {"type": "rerun", "run_id": fine["id"]}


def test_retrying_a_run_that_did_not_fail_is_a_typed_error_without_traceback(cli: Cli) -> None:
    run = trigger(cli, "greet", "--payload", '{"name": "Ada"}')
    cli.run("worker", APP, "--drain")

    refused = cli.run("runs", "retry", APP, run["id"], expect=1)

    assert refused.stderr.startswith("error[invalid_state]: ")
    assert "only failed runs can be retried" in refused.stderr
    assert "Traceback" not in refused.stderr
    rerun_active = cli.run("runs", "rerun", APP, trigger(cli, "greet")["id"], expect=1)
    assert rerun_active.stderr.startswith("error[invalid_state]: ")


def test_cancel_stops_a_waiting_run_and_unknown_runs_are_not_found(cli: Cli) -> None:
    later = trigger(cli, "greet", "--payload", '{"name": "Ada"}', "--delay", "1h")
    assert later["status"] == "scheduled"

    cancelled = cli.json("runs", "cancel", APP, later["id"], "--reason", "not needed")

    assert cancelled["status"] == "cancelled"
    missing = cli.run("runs", "cancel", APP, "no-such-run", expect=1)
    assert missing.stderr.startswith("error[run_not_found]: ")
    assert cli.run("runs", "show", APP, "no-such-run", expect=1).stderr.startswith(
        "error[run_not_found]"
    )


def test_runs_list_filters_and_pages_with_a_cursor(cli: Cli) -> None:
    first = trigger(cli, "greet", "--payload", '{"name": "A"}')
    second = trigger(cli, "greet", "--payload", '{"name": "B"}')
    report = trigger(cli, "reports.render")

    page = cli.json("runs", "list", APP, "--task", "greet", "--limit", "1")
    rest = cli.json("runs", "list", APP, "--task", "greet", "--cursor", page["next_cursor"])
    by_queue = cli.json("runs", "list", APP, "--queue", "reports", "--status", "queued")

    assert [r["id"] for r in page["runs"] + rest["runs"]] == [second["id"], first["id"]]
    assert [r["id"] for r in by_queue["runs"]] == [report["id"]]
    assert cli.json("runs", "list", APP, "--status", "failed")["runs"] == []


def test_prune_deletes_finished_runs_older_than_the_cutoff(cli: Cli) -> None:
    done = trigger(cli, "greet", "--payload", '{"name": "Ada"}')
    waiting = trigger(cli, "greet", "--payload", '{"name": "Bo"}', "--delay", "1h")
    cli.run("worker", APP, "--drain")

    assert cli.json("runs", "prune", APP, "--older-than", "7d") == {"pruned": 0}
    assert cli.json("runs", "prune", APP, "--older-than", "0s") == {"pruned": 1}
    cli.run("runs", "show", APP, done["id"], expect=1)
    assert cli.json("runs", "show", APP, waiting["id"])["status"] == "scheduled"


def test_queues_shows_counts_per_queue_and_status(cli: Cli) -> None:
    trigger(cli, "greet", "--payload", '{"name": "Ada"}')
    trigger(cli, "reports.render")
    trigger(cli, "reports.render")

    stats = {entry["queue"]: entry for entry in cli.json("queues", APP)}
    table = cli.run("queues", APP).stdout

    assert stats["main"]["counts"]["queued"] == 1
    assert stats["reports"]["counts"]["queued"] == 2
    assert stats["reports"]["waiting"] == 2
    assert "reports" in table and "succeeded" in table


def test_runlane_app_environment_variable_stands_in_for_app(cli: Cli) -> None:
    env = {"RUNLANE_APP": APP}
    run = cli.json("trigger", "greet", "--payload", '{"name": "Ada"}', env=env)

    shown = cli.json("runs", "show", run["id"], env=env)
    explicit = cli.json("runs", "show", "app:build", run["id"], env=env)

    assert shown["id"] == explicit["id"] == run["id"]
    assert [s["queue"] for s in cli.json("queues", env=env)] == ["main", "reports"]


def test_a_factory_function_can_name_the_runtime(cli: Cli) -> None:
    run = cli.json("trigger", "app:build", "greet", "--payload", '{"name": "Ada"}')
    assert run["task_id"] == "greet"


def test_typed_errors_from_the_runtime_exit_1_with_their_code(cli: Cli) -> None:
    unknown_task = cli.run("trigger", APP, "no.such.task", expect=1)
    bad_payload = cli.run("trigger", APP, "greet", "--queue", "nowhere", expect=1)

    assert unknown_task.stderr.startswith("error[task_not_found]: ")
    assert bad_payload.stderr.startswith("error[queue_not_found]: ")
    assert "Traceback" not in unknown_task.stderr + bad_payload.stderr


def test_an_unknown_task_id_gets_a_did_you_mean(cli: Cli) -> None:
    typo = cli.run("trigger", APP, "greeet", expect=1)

    assert "task 'greeet' is not registered" in typo.stderr
    assert "Did you mean 'greet'?" in typo.stderr


def test_json_errors_go_to_stdout_as_an_object_and_to_stderr_as_a_line(cli: Cli) -> None:
    typo = cli.run("trigger", APP, "greeet", "--json", expect=1)
    missing = cli.run("runs", "show", APP, "no-such-run", "--json", expect=1)
    bad_app = cli.run("runs", "list", "app:nothing_here", "--json", expect=1)

    error = json.loads(typo.stdout)
    assert error["code"] == "task_not_found"
    assert "Did you mean 'greet'?" in error["message"]
    assert error["meta"] == {"task_id": "greeet", "suggestions": ["greet"]}
    assert typo.stderr.startswith("error[task_not_found]: task 'greeet' is not registered")
    for failed in (missing, bad_app):
        assert json.loads(failed.stdout).keys() == {"code", "message", "meta"}
        assert failed.stderr.startswith(f"error[{json.loads(failed.stdout)['code']}]: ")


@pytest.mark.parametrize(
    ("import_path", "says"),
    [
        ("missing_module:rl", "no module named 'missing_module'"),
        ("app:nothing_here", "has no attribute 'nothing_here'"),
        ("app", "not an import path of the form module:attribute"),
        ("app:not_a_runtime", "is a int"),
    ],
)
def test_a_bad_app_path_exits_1_with_a_clear_message(cli: Cli, import_path: str, says: str) -> None:
    failed = cli.run("queues", import_path, expect=1)

    assert failed.stderr.startswith("error[configuration_invalid]: ")
    assert says in failed.stderr
    assert "Traceback" not in failed.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("runs", "list", APP, "--status", "bogus"),
        ("trigger", APP, "greet", "--payload", "{not json"),
        ("trigger", APP, "greet", "--delay", "soon"),
        ("runs", "prune", APP),
        ("runs", "show", APP),
    ],
)
def test_bad_usage_is_a_click_usage_error(cli: Cli, args: tuple[str, ...]) -> None:
    failed = cli.run(*args, expect=2)

    assert "Usage: runlane" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_schedules_are_listed_paused_and_resumed(cli: Cli) -> None:
    (listed,) = cli.json("schedules", "list", APP)
    assert listed["id"] == "reports.nightly"
    assert listed["task_id"] == "reports.render"
    assert listed["next_fire_at"] is not None

    paused = cli.json("schedules", "pause", APP, "reports.nightly")
    assert paused["paused"] is True and paused["next_fire_at"] is None
    assert cli.json("schedules", "list", APP)[0]["paused"] is True
    resumed = cli.json("schedules", "resume", APP, "reports.nightly")
    assert resumed["paused"] is False
    assert "reports.nightly" in cli.run("schedules", "list", APP).stdout
    missing = cli.run("schedules", "pause", APP, "nope", expect=1)
    assert missing.stderr.startswith("error[schedule_not_found]: ")


def test_queues_are_paused_and_resumed_and_their_counts_show_the_state(cli: Cli) -> None:
    paused = cli.json("queues", "pause", APP, "reports", "--reason", "partner incident")
    assert (paused["queue"], paused["paused"]) == ("reports", True)
    assert paused["paused_reason"] == "partner incident" and paused["paused_at"] is not None
    trigger(cli, "reports.render")
    cli.run("worker", APP, "--drain")
    stats = {entry["queue"]: entry for entry in cli.json("queues", APP)}
    assert stats["reports"]["paused"] is True and stats["main"]["paused"] is False
    assert stats["reports"]["counts"]["queued"] == 1
    assert "paused" in cli.run("queues", APP).stdout
    resumed = cli.json("queues", "resume", APP, "reports")
    assert resumed["paused"] is False
    cli.run("worker", APP, "--drain")
    stats = {entry["queue"]: entry for entry in cli.json("queues", APP)}
    assert stats["reports"]["counts"]["succeeded"] == 1
    missing = cli.run("queues", "pause", APP, "nope", expect=1)
    assert missing.stderr.startswith("error[queue_not_found]: ")


def test_commands_name_the_sqlite_file_they_use(cli: Cli) -> None:
    database = str(cli.cwd.resolve() / "app.db")

    drained = cli.run("worker", APP, "--drain")
    empty = cli.run("runs", "list", APP)

    assert f"storage {database}" in drained.stderr + drained.stdout
    assert f"no runs match in {database}." in empty.stdout


def test_runs_show_lists_dependencies_and_dependents_with_their_statuses(cli: Cli) -> None:
    first = trigger(cli, "greet", "--payload", '{"name": "Ada"}')
    second = trigger(cli, "greet", "--payload", '{"name": "Bo"}', "--after", first["id"])
    assert second["status"] == "waiting"

    shown = cli.json("runs", "show", APP, second["id"])
    assert shown["dependencies"] == [{"id": first["id"], "task_id": "greet", "status": "queued"}]
    assert cli.json("runs", "show", APP, first["id"])["dependents"] == [
        {"id": second["id"], "task_id": "greet", "status": "waiting"}
    ]
    cli.run("worker", APP, "--drain")
    shown = cli.json("runs", "show", APP, second["id"])
    assert shown["status"] == "succeeded"
    assert shown["dependencies"][0]["status"] == "succeeded"
    table = cli.run("runs", "show", APP, second["id"]).stdout
    assert "dependencies" in table and first["id"] in table
    refused = cli.run("trigger", APP, "greet", "--after", "no-such-run", expect=1)
    assert refused.stderr.startswith("error[run_not_found]: ")
