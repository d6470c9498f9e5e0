"""The registry and the Runlane constructor: unknown names and policy drift are rejected.

Building a runtime touches no database (a SQLite lane opens its file on first use),
so these tests stay pure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    Lane,
    Runlane,
    RunlaneError,
    TaskDef,
    queue,
    schedule,
    sqlite_lane,
    task,
)
from runlane.core.registry import Registry
from runlane.ports.storage import QueuePolicy

MAIN = queue("main", default=True)
BULK = queue("bulk", concurrency_limit=2)


def _task(task_id: str, **options: Any) -> TaskDef[Any]:
    def handler(payload: Any, ctx: Context) -> None:
        return None

    return task(task_id, **options)(handler)


def _error(call: Any, *args: Any, **kwargs: Any) -> RunlaneError:
    with pytest.raises(RunlaneError) as caught:
        call(*args, **kwargs)
    return caught.value


@pytest.fixture
def lane(tmp_path: Path) -> Lane:
    return sqlite_lane(tmp_path / "never-opened.db")


# -- queues ----------------------------------------------------------------------------


def test_queues_and_tasks_are_registered_by_name() -> None:
    send = _task("emails.send", queue=BULK)
    registry = Registry([MAIN, BULK], [send])
    assert registry.queues == {"main": MAIN, "bulk": BULK}
    assert registry.tasks == {"emails.send": send}
    assert registry.default_queue is MAIN
    assert registry.queue_policies == [QueuePolicy("main", None), QueuePolicy("bulk", 2)]


def test_a_queue_name_registered_twice_is_rejected() -> None:
    error = _error(Registry, [MAIN, queue("main")], [])
    assert error.code is ErrorCode.CONFIGURATION_INVALID
    assert "'main'" in error.message


def test_two_default_queues_are_rejected() -> None:
    error = _error(Registry, [MAIN, queue("other", default=True)], [])
    assert error.code is ErrorCode.CONFIGURATION_INVALID
    assert "default" in error.message


def test_no_default_queue_is_allowed_when_every_task_names_its_queue() -> None:
    registry = Registry([BULK], [_task("t", queue=BULK)])
    assert registry.default_queue is None


@pytest.mark.parametrize("queues", [MAIN, "main", [MAIN, "bulk"], [{"name": "main"}], None])
def test_queues_must_be_a_list_of_queue_definitions(queues: Any) -> None:
    assert _error(Registry, queues, []).code is ErrorCode.CONFIGURATION_INVALID


# -- tasks -----------------------------------------------------------------------------


def test_a_task_id_registered_twice_is_rejected() -> None:
    error = _error(Registry, [MAIN], [_task("t"), _task("t")])
    assert error.code is ErrorCode.CONFIGURATION_INVALID
    assert "'t'" in error.message


def test_tasks_may_be_given_as_a_mapping() -> None:
    send = _task("emails.send")
    assert Registry([MAIN], {"anything": send}).tasks == {"emails.send": send}


@pytest.mark.parametrize("tasks", [["emails.send"], [lambda payload, ctx: None]])
def test_tasks_must_hold_task_definitions(tasks: Any) -> None:
    assert _error(Registry, [MAIN], tasks).code is ErrorCode.CONFIGURATION_INVALID


def test_a_single_task_instead_of_a_list_is_a_configuration_error() -> None:
    assert _error(Registry, [MAIN], _task("t")).code is ErrorCode.CONFIGURATION_INVALID


def test_a_task_on_an_unregistered_queue_is_queue_not_found() -> None:
    error = _error(Registry, [MAIN], [_task("t", queue=queue("elsewhere"))])
    assert error.code is ErrorCode.QUEUE_NOT_FOUND
    assert error.meta == {"queue": "elsewhere"}


def test_a_task_whose_queue_has_a_different_policy_is_queue_policy_drift() -> None:
    drifted = queue("bulk", concurrency_limit=5)
    error = _error(Registry, [MAIN, BULK], [_task("t", queue=drifted)])
    assert error.code is ErrorCode.QUEUE_POLICY_DRIFT
    assert error.meta == {"queue": "bulk"}


def test_an_equal_copy_of_a_registered_queue_is_not_drift() -> None:
    registry = Registry([MAIN, BULK], [_task("t", queue=queue("bulk", concurrency_limit=2))])
    assert registry.tasks["t"].queue == BULK


# -- schedules -------------------------------------------------------------------------


def test_schedules_are_registered_with_their_task() -> None:
    nightly = schedule("nightly", cron="0 3 * * *")
    report = _task("report", schedules=[nightly])
    assert Registry([MAIN], [report]).schedules == {"nightly": (nightly, report)}


def test_a_schedule_id_used_by_two_tasks_is_rejected() -> None:
    first = _task("a", schedules=[schedule("nightly", cron="0 3 * * *")])
    second = _task("b", schedules=[schedule("nightly", every="1h")])
    error = _error(Registry, [MAIN], [first, second])
    assert error.code is ErrorCode.CONFIGURATION_INVALID
    assert "'nightly'" in error.message


def test_a_schedule_id_used_twice_by_one_task_is_rejected() -> None:
    twice = _task("a", schedules=[schedule("s", every="1h"), schedule("s", every="2h")])
    assert _error(Registry, [MAIN], [twice]).code is ErrorCode.CONFIGURATION_INVALID


def test_a_schedule_on_an_unregistered_queue_is_queue_not_found() -> None:
    stray = _task("a", schedules=[schedule("s", every="1h", queue=queue("elsewhere"))])
    assert _error(Registry, [MAIN], [stray]).code is ErrorCode.QUEUE_NOT_FOUND


def test_a_schedule_whose_queue_drifted_is_queue_policy_drift() -> None:
    drifted = _task("a", schedules=[schedule("s", every="1h", queue=queue("bulk"))])
    assert _error(Registry, [MAIN, BULK], [drifted]).code is ErrorCode.QUEUE_POLICY_DRIFT


# -- resolving -------------------------------------------------------------------------


def test_resolving_an_unknown_task_is_task_not_found() -> None:
    registry = Registry([MAIN], [_task("known")])
    error = _error(registry.resolve_task, "unknown")
    assert error.code is ErrorCode.TASK_NOT_FOUND
    assert _error(registry.resolve_task, _task("unknown")).code is ErrorCode.TASK_NOT_FOUND


def test_resolving_a_different_definition_with_a_registered_id_is_rejected() -> None:
    registry = Registry([MAIN], [_task("t")])
    assert _error(registry.resolve_task, _task("t")).code is ErrorCode.CONFIGURATION_INVALID


def test_a_task_resolves_by_definition_or_by_id() -> None:
    send = _task("send")
    registry = Registry([MAIN], [send])
    assert registry.resolve_task(send) is send
    assert registry.resolve_task("send") is send


def test_queue_selection_prefers_the_override_then_the_task_queue_then_the_default() -> None:
    on_bulk = _task("on_bulk", queue=BULK)
    anywhere = _task("anywhere")
    registry = Registry([MAIN, BULK], [on_bulk, anywhere])
    assert registry.queue_for(on_bulk, "main") is MAIN
    assert registry.queue_for(on_bulk, None) is BULK
    assert registry.queue_for(anywhere, None) is MAIN
    assert registry.queue_for(anywhere, BULK) is BULK


def test_without_a_default_queue_a_task_without_a_queue_cannot_be_placed() -> None:
    anywhere = _task("anywhere")
    registry = Registry([BULK], [anywhere])
    error = _error(registry.queue_for, anywhere, None)
    assert error.code is ErrorCode.CONFIGURATION_INVALID
    assert "default" in error.message


def test_an_unknown_queue_override_is_queue_not_found() -> None:
    registry = Registry([MAIN], [_task("t")])
    assert _error(registry.queue_for, registry.tasks["t"], "nowhere").code is (
        ErrorCode.QUEUE_NOT_FOUND
    )


def test_a_worker_filter_selects_registered_queue_policies() -> None:
    registry = Registry([MAIN, BULK], [])
    assert registry.policies_for(None) == registry.queue_policies
    assert registry.policies_for(["bulk"]) == [QueuePolicy("bulk", 2)]
    assert _error(registry.policies_for, ["nowhere"]).code is ErrorCode.QUEUE_NOT_FOUND
    assert _error(registry.policies_for, "bulk").code is ErrorCode.CONFIGURATION_INVALID


# -- Runlane(...) ----------------------------------------------------------------------


def test_the_runtime_rejects_a_lane_that_is_not_a_lane(tmp_path: Path) -> None:
    error = _error(Runlane, lane=str(tmp_path / "app.db"), queues=[MAIN], tasks=[])
    assert error.code is ErrorCode.CONFIGURATION_INVALID
    assert "sqlite_lane" in error.message


def test_the_runtime_builds_its_registry_eagerly(lane: Lane) -> None:
    error = _error(Runlane, lane=lane, queues=[MAIN, MAIN], tasks=[])
    assert error.code is ErrorCode.CONFIGURATION_INVALID
    drift = _error(Runlane, lane=lane, queues=[BULK], tasks=[_task("t", queue=queue("bulk"))])
    assert drift.code is ErrorCode.QUEUE_POLICY_DRIFT


@pytest.mark.parametrize(
    "options",
    [
        {"environment": ""},
        {"environment": "prod:eu"},
        {"worker_id": "host:1"},
        {"max_payload_bytes": 0},
        {"max_payload_bytes": True},
        {"max_payload_bytes": 1.5},
        {"lease_duration": "0s"},
        {"lease_duration": "eventually"},
        {"retention": "0s"},
        {"sync_threads": 0},
        {"sync_threads": "4"},
    ],
    ids=repr,
)
def test_bad_runtime_options_raise_at_construction(lane: Lane, options: dict[str, Any]) -> None:
    error = _error(Runlane, lane=lane, queues=[MAIN], tasks=[], **options)
    assert error.code is ErrorCode.CONFIGURATION_INVALID


def test_a_schedule_payload_over_the_runtimes_payload_cap_is_rejected(lane: Lane) -> None:
    nightly = schedule("nightly", cron="0 3 * * *", payload={"blob": "x" * 2000})
    report = _task("report", schedules=[nightly])
    error = _error(Runlane, lane=lane, queues=[MAIN], tasks=[report], max_payload_bytes=1000)
    assert error.code is ErrorCode.CONFIGURATION_INVALID
    assert "nightly" in error.message and error.meta["reason"] == "payload_too_large"
    assert Runlane(lane=lane, queues=[MAIN], tasks=[report], max_payload_bytes=4000)


def test_a_runtime_exposes_its_registered_queues_and_tasks(lane: Lane) -> None:
    send = _task("send")
    rl = Runlane(lane=lane, queues=[MAIN], tasks=[send], environment="staging")
    assert rl.environment == "staging"
    assert rl.tasks == {"send": send}
    assert rl.queues == {"main": MAIN}
    assert ":" not in rl.worker_id


def test_the_heartbeat_interval_defaults_to_a_third_of_the_lease(lane: Lane) -> None:
    rl = Runlane(lane=lane, queues=[MAIN], tasks=[], lease_duration="30s")
    assert rl.lease_settings(None, None).interval == 10.0
    assert rl.lease_settings("3s", "200ms").interval == 0.2


def test_a_heartbeat_interval_not_shorter_than_the_lease_is_rejected(lane: Lane) -> None:
    rl = Runlane(lane=lane, queues=[MAIN], tasks=[])
    assert _error(rl.lease_settings, "1s", "1s").code is ErrorCode.CONFIGURATION_INVALID


def test_an_unknown_task_id_names_the_registered_ids_that_look_alike() -> None:
    registry = Registry([MAIN], [_task("emails.welcome"), _task("emails.goodbye"), _task("sync")])

    typo = _error(registry.resolve_task, "emails.welcom")
    unrelated = _error(registry.resolve_task, "billing.charge")

    assert typo.code is ErrorCode.TASK_NOT_FOUND
    assert typo.message.endswith("Did you mean 'emails.welcome'?")
    assert typo.meta == {"task_id": "emails.welcom", "suggestions": ["emails.welcome"]}
    assert "Did you mean" not in unrelated.message
    assert unrelated.meta["suggestions"] == []
