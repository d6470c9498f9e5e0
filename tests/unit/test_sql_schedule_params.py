"""The schedule statements' parameters, shared by both SQL drivers."""

from __future__ import annotations

from datetime import UTC, datetime

from runlane.ports.storage import NewRun, ScheduleOccurrence
from runlane.storage.sql.schedules import occurrence_scope, seen_params
from runlane.types.clock import to_micros
from runlane.types.runs import RunSource, RunSourceType, RunStatus

SLOT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_an_occurrence_is_scoped_by_environment_schedule_and_slot_in_microseconds() -> None:
    run = NewRun(
        id="r1",
        task_id="t",
        queue="main",
        status=RunStatus.SCHEDULED,
        payload=None,
        payload_json="null",
        run_at=SLOT,
        source=RunSource(RunSourceType.SCHEDULE, schedule_id="nightly", occurs_at=SLOT),
    )
    scope = occurrence_scope("prod", ScheduleOccurrence("nightly", SLOT, run), 42)
    assert scope == {
        "environment": "prod",
        "schedule_id": "nightly",
        "slot": to_micros(SLOT),
        "now": 42,
    }


def test_seen_params_are_one_set_per_schedule_and_none_for_none() -> None:
    assert seen_params("prod", [], 7) == []
    assert seen_params("prod", ["a", "b"], 7) == [
        {"environment": "prod", "schedule_id": "a", "now": 7},
        {"environment": "prod", "schedule_id": "b", "now": 7},
    ]
