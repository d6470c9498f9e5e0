"""queue(), task() and schedule() validate eagerly: bad configuration raises at the call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel

from runlane import (
    Context,
    ErrorCode,
    RetryPolicy,
    RunlaneError,
    TaskDef,
    queue,
    schedule,
    task,
)
from runlane.model.schedule_defs import MAX_SCHEDULE_ID_LENGTH, occurrence_key
from runlane.types.ids import MAX_IDENTIFIER_LENGTH
from runlane.types.retry import DEFAULT_RETRY_POLICY


class Invoice(BaseModel):
    account_id: str


def _configuration_error(call: Any, *args: Any, **kwargs: Any) -> RunlaneError:
    with pytest.raises(RunlaneError) as caught:
        call(*args, **kwargs)
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
    return caught.value


def _noop(payload: Any, ctx: Context) -> None:
    return None


# -- queue() ---------------------------------------------------------------------------


def test_a_queue_keeps_its_policy() -> None:
    bounded = queue("invoice_sync", concurrency_limit=2, dispatch_timeout="2m")
    assert (bounded.name, bounded.default) == ("invoice_sync", False)
    assert (bounded.concurrency_limit, bounded.dispatch_timeout) == (2, 120.0)
    assert queue("main", default=True).default is True


def test_dispatch_timeout_without_concurrency_limit_is_rejected() -> None:
    error = _configuration_error(queue, "main", dispatch_timeout="2m")
    assert "concurrency_limit" in error.message


@pytest.mark.parametrize("limit", [0, -1, True, False, 1.5, "2"])
def test_concurrency_limit_must_be_a_positive_whole_number(limit: object) -> None:
    _configuration_error(queue, "bounded", concurrency_limit=limit)


@pytest.mark.parametrize("timeout", ["0s", "-1s", "later", True])
def test_dispatch_timeout_must_be_a_positive_duration(timeout: object) -> None:
    _configuration_error(queue, "bounded", concurrency_limit=1, dispatch_timeout=timeout)


@pytest.mark.parametrize("name", ["", "a:b", None, 7])
def test_a_queue_name_must_be_an_identifier(name: object) -> None:
    _configuration_error(queue, name)


def test_queues_with_the_same_policy_are_equal() -> None:
    assert queue("q", concurrency_limit=1) == queue("q", concurrency_limit=1)
    assert queue("q", concurrency_limit=1) != queue("q", concurrency_limit=2)


# -- task() ----------------------------------------------------------------------------


def test_a_task_keeps_its_function_and_defaults() -> None:
    @task("emails.welcome")
    async def send_welcome(payload: Any, ctx: Context) -> None: ...

    assert isinstance(send_welcome, TaskDef)
    assert send_welcome.id == "emails.welcome"
    assert send_welcome.is_async is True
    assert send_welcome.retry is DEFAULT_RETRY_POLICY
    assert send_welcome.queue is None
    assert send_welcome.timeout is None
    assert send_welcome.idempotency_key_ttl == 30 * 86400


def test_a_sync_function_is_recorded_as_sync_and_stays_callable() -> None:
    @task("math.double")
    def double(payload: int, ctx: Any) -> int:
        return payload * 2

    assert double.is_async is False
    assert double(21, None) == 42


def test_task_options_are_parsed_at_definition() -> None:
    main = queue("main")
    policy = RetryPolicy(max_attempts=5)

    @task("t", queue=main, schema=Invoice, retry=policy, timeout="90s")
    def handler(payload: Invoice, ctx: Context) -> None: ...

    assert handler.queue is main
    assert handler.schema is Invoice
    assert handler.retry is policy
    assert handler.timeout == 90.0


@pytest.mark.parametrize(
    "options",
    [
        {"schema": dict},
        {"schema": Invoice(account_id="a")},
        {"schema": "Invoice"},
        {"queue": "main"},
        {"retry": {"max_attempts": 3}},
        {"timeout": "0s"},
        {"timeout": "forever"},
        {"idempotency_key": "a:b"},
        {"idempotency_key": ""},
        {"idempotency_key": 42},
        {"singleton_key": 3.5},
        {"idempotency_key_ttl": "0s"},
        {"idempotency_key_ttl": "forever"},
        {"idempotency_key_ttl": None},
        {"schedules": ["invoices.nightly"]},
    ],
    ids=repr,
)
def test_bad_task_options_raise_when_task_is_called(options: dict[str, Any]) -> None:
    _configuration_error(task, "t", **options)


@pytest.mark.parametrize("task_id", ["", "a:b", None])
def test_a_task_id_must_be_an_identifier(task_id: object) -> None:
    _configuration_error(task, task_id)


def test_key_options_may_be_strings_or_functions_of_the_payload() -> None:
    def by_account(payload: Invoice) -> str:
        return payload.account_id

    @task("t", schema=Invoice, idempotency_key=by_account, singleton_key="only-one")
    def handler(payload: Invoice, ctx: Context) -> None: ...

    assert handler.idempotency_key is by_account
    assert handler.singleton_key == "only-one"


def test_idempotency_ttl_active_means_only_while_the_run_is_active() -> None:
    active = task("t", idempotency_key_ttl="active")(_noop)
    timed = task("t", idempotency_key_ttl="1h")(_noop)
    assert active.idempotency_key_ttl is None
    assert timed.idempotency_key_ttl == 3600.0


def test_decorating_something_that_is_not_callable_is_rejected() -> None:
    _configuration_error(task("t"), 42)


# -- schedule() ------------------------------------------------------------------------


def test_a_schedule_keeps_its_options() -> None:
    nightly = schedule(
        "invoices.nightly",
        cron="0 3 * * *",
        timezone="Europe/Berlin",
        payload={"account_id": "all"},
        catch_up=True,
    )
    assert (nightly.cron, nightly.every, nightly.run_at) == ("0 3 * * *", None, None)
    assert nightly.timezone == "Europe/Berlin"
    assert nightly.enabled is True
    assert nightly.catch_up is True
    assert schedule("s", every="15m").every == 900.0


def test_run_at_is_normalised_to_utc() -> None:
    local = datetime(2030, 6, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    once = schedule("once", run_at=local)
    assert once.run_at == datetime(2030, 6, 1, 10, tzinfo=UTC)
    assert once.run_at is not None and once.run_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "moment",
    [
        datetime.min.replace(tzinfo=timezone(timedelta(hours=5))),
        datetime.max.replace(tzinfo=timezone(timedelta(hours=-5))),
    ],
    ids=["min-east", "max-west"],
)
def test_a_run_at_past_the_datetime_range_in_utc_is_a_configuration_error(
    moment: datetime,
) -> None:
    with pytest.raises(RunlaneError) as caught:
        schedule("once", run_at=moment)
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
    assert "outside the range" in caught.value.message


_AT = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "triggers",
    [
        {},
        {"cron": "0 3 * * *", "every": "1h"},
        {"cron": "0 3 * * *", "run_at": _AT},
        {"every": "1h", "run_at": _AT},
        {"cron": "0 3 * * *", "every": "1h", "run_at": _AT},
    ],
)
def test_a_schedule_needs_exactly_one_of_cron_every_or_run_at(triggers: dict[str, Any]) -> None:
    error = _configuration_error(schedule, "s", **triggers)
    assert "exactly one" in error.message


@pytest.mark.parametrize(
    "cron", ["", "* * * *", "0 0 * * * *", "61 * * * *", "0 25 * * *", "@daily", "every day", 5]
)
def test_an_invalid_cron_expression_is_rejected(cron: object) -> None:
    _configuration_error(schedule, "s", cron=cron)


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../etc/passwd", None])
def test_an_unknown_timezone_is_rejected(zone: object) -> None:
    _configuration_error(schedule, "s", cron="0 3 * * *", timezone=zone)


def test_a_naive_run_at_is_rejected() -> None:
    error = _configuration_error(schedule, "s", run_at=datetime(2030, 1, 1))
    assert "timezone-aware" in error.message


@pytest.mark.parametrize("run_at", ["2030-01-01T00:00:00Z", 1893456000])
def test_run_at_must_be_a_datetime(run_at: object) -> None:
    _configuration_error(schedule, "s", run_at=run_at)


@pytest.mark.parametrize("every", ["0s", "-1m", "often", True])
def test_every_must_be_a_positive_duration(every: object) -> None:
    _configuration_error(schedule, "s", every=every)


@pytest.mark.parametrize("schedule_id", ["", "a:b"])
def test_a_schedule_id_must_be_an_identifier(schedule_id: str) -> None:
    _configuration_error(schedule, schedule_id, every="1h")


@pytest.mark.parametrize("cron", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"])
def test_a_cron_expression_that_never_fires_is_rejected(cron: str) -> None:
    error = _configuration_error(schedule, "s", cron=cron)
    assert "never fires" in error.message


def test_a_cron_expression_that_fires_only_in_leap_years_is_accepted() -> None:
    leap_day = schedule("s", cron="0 0 29 2 *")
    assert leap_day.next_slot_after(datetime(2025, 1, 1, tzinfo=UTC)) == datetime(
        2028, 2, 29, tzinfo=UTC
    )


def test_the_longest_schedule_id_keeps_every_occurrence_key_within_the_identifier_limit() -> None:
    limit = MAX_SCHEDULE_ID_LENGTH
    for moment in (datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)):
        assert len(occurrence_key("s" * limit, moment)) <= MAX_IDENTIFIER_LENGTH
    assert schedule("s" * limit, every="1h").id == "s" * limit


@pytest.mark.parametrize("extra", [1, 3, 25])
def test_a_schedule_id_too_long_for_its_occurrence_keys_is_rejected(extra: int) -> None:
    error = _configuration_error(schedule, "s" * (MAX_SCHEDULE_ID_LENGTH + extra), every="1h")
    assert str(MAX_SCHEDULE_ID_LENGTH) in error.message


def test_a_schedule_queue_must_be_a_queue_definition() -> None:
    _configuration_error(schedule, "s", every="1h", queue="main")


def test_a_schedule_payload_that_fails_the_task_schema_raises_at_task_definition() -> None:
    decorate = task(
        "invoices.sync",
        schema=Invoice,
        schedules=[schedule("invoices.nightly", cron="0 3 * * *", payload={"wrong": 1})],
    )
    error = _configuration_error(decorate, _noop)
    assert "invoices.nightly" in error.message
    assert "invoices.sync" in error.message


def test_a_schedule_payload_that_fits_the_schema_is_accepted() -> None:
    nightly = schedule("invoices.nightly", cron="0 3 * * *", payload={"account_id": "all"})
    definition = task("invoices.sync", schema=Invoice, schedules=[nightly])(_noop)
    assert definition.schedules == (nightly,)


def test_a_schedule_payload_that_is_not_json_raises_for_a_schemaless_task() -> None:
    decorate = task("t", schedules=[schedule("s", every="1h", payload={"at": object()})])
    _configuration_error(decorate, _noop)
