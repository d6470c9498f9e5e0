"""Long-running and maintenance commands: migrate, tick, and a polling worker's shutdown."""

from __future__ import annotations

import json
import signal
import time

from tests.e2e.runner import COMMAND_TIMEOUT, Cli

APP = "app:rl"
DUTIES = {"leases_recovered", "cancellations_finished", "idempotency_keys_released", "total"}


def test_migrate_can_run_again_and_again(cli: Cli) -> None:
    first = cli.json("migrate", APP)
    second = cli.json("migrate", APP)

    assert isinstance(first["applied"], list)
    assert second == {"applied": []}
    assert "schema is up to date" in cli.run("migrate", APP).stdout


def test_tick_once_reports_what_each_duty_did(cli: Cli) -> None:
    first = cli.json("tick", APP)
    again = cli.json("tick", APP)

    assert first.keys() >= DUTIES
    # The nightly schedule is first seen now: last night's slot does not fire.
    assert first["schedules_materialized"] == 0
    assert again["total"] == 0
    assert cli.json("runs", "list", APP)["runs"] == []
    assert "leases recovered" in cli.run("tick", APP).stdout


def test_tick_every_logs_each_pass_and_stops_gracefully_on_sigterm(cli: Cli) -> None:
    ticking = cli.popen("tick", APP, "--every", "100ms", "--json")
    # Signal only once two passes are out: by then the loop (and its handlers) runs,
    # however slowly a busy machine started the process.
    assert ticking.stdout is not None
    first = [ticking.stdout.readline(), ticking.stdout.readline()]

    ticking.send_signal(signal.SIGTERM)
    rest, err = ticking.communicate(timeout=COMMAND_TIMEOUT)
    out = "".join(first) + rest

    assert ticking.returncode == 0, err
    passes = [json.loads(line) for line in out.splitlines()]
    assert len(passes) >= 2
    assert [p["pass"] for p in passes] == list(range(1, len(passes) + 1))
    assert all(p.keys() >= DUTIES for p in passes)


def test_polling_worker_executes_new_runs_and_stops_on_sigint(cli: Cli) -> None:
    working = cli.popen("worker", APP, "--concurrency", "2")
    try:
        run = cli.json("trigger", APP, "greet", "--payload", '{"name": "Ada"}')
        deadline = time.monotonic() + 30
        while cli.json("runs", "show", APP, run["id"])["status"] != "succeeded":
            assert working.poll() is None, f"the worker exited early: {working.communicate()}"
            assert time.monotonic() < deadline, "the polling worker never ran the run"
            time.sleep(0.2)
    finally:
        working.send_signal(signal.SIGINT)
        out, err = working.communicate(timeout=COMMAND_TIMEOUT)

    assert working.returncode == 0, err
    assert run["id"] in out
    assert "worker stopped after 1 attempt." in err
