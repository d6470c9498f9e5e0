"""``runlane demo``: the README's first command, end to end."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.e2e.runner import COMMAND_TIMEOUT, clean_environment, runlane_command


def run_demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        runlane_command("demo", *args),
        cwd=cwd,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_demo_drains_every_run_to_a_final_status_and_summarises(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"

    summary = json.loads(run_demo("--runs", "200", "--db", str(db), "--json", cwd=tmp_path).stdout)

    assert summary["runs"] == 200
    assert summary["completed"] is True
    totals = summary["totals"]
    assert totals["runs"] == 200
    assert totals["succeeded"] + totals["failed"] == 200
    assert totals["attempts"] == 200 + totals["retries"] + totals["releases"]
    assert set(summary["queues"]) == {"emails", "reports", "billing"}
    assert sum(q["runs"] for q in summary["queues"].values()) == 200
    assert summary["runs_per_second"] > 0
    assert summary["db"] == str(db)
    assert db.exists()


def test_demo_fans_messages_out_and_replays_the_dead_letter(tmp_path: Path) -> None:
    summary = json.loads(
        run_demo("--runs", "50", "--messages", "20", "--json", cwd=tmp_path).stdout
    )

    fan_out = summary["fan_out"]
    assert fan_out["messages"] == 20
    # Receipts and the ledger get every message; the warehouse the 10 paid ones.
    assert fan_out["deliveries"] == 50
    assert fan_out["dead_lettered"] == 1 and fan_out["replayed"] == 1
    assert fan_out["halted_keys"] == 1
    assert fan_out["succeeded"] == 50


def test_demo_retries_and_releases_with_a_fixed_seed(tmp_path: Path) -> None:
    summary = json.loads(run_demo("--runs", "400", "--seed", "7", "--json", cwd=tmp_path).stdout)

    assert summary["queues"]["billing"]["retries"] > 0
    assert summary["queues"]["emails"]["retries"] > 0
    assert summary["queues"]["reports"]["releases"] > 0
    assert summary["db"] is None


def test_demo_prints_a_progress_bar_and_summary_tables_for_people(tmp_path: Path) -> None:
    out = run_demo("--runs", "100", "--concurrency", "8", cwd=tmp_path).stdout

    assert "runlane demo" in out
    assert "runs/s" in out
    assert "per queue" in out
    for name in ("emails", "reports", "billing", "total", "retries", "releases"):
        assert name in out
    assert "topic fan-out" in out and "replayed" in out
