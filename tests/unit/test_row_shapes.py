"""Each PostgreSQL batch row shape is declared once (storage/postgres/shapes.py): the
statements read the fields where the declaration puts them, with its types, and the
encoders write them there."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane.ports.storage import (
    NewDelivery,
    NewEvent,
    NewMessage,
    NewRun,
    ProgressWrite,
    RunChanges,
    Transition,
)
from runlane.storage.postgres.params import copy_text, creation_batch
from runlane.storage.postgres.publishing import delivery_row, plain_batch_params
from runlane.storage.postgres.queries import QUERY_TEMPLATES
from runlane.storage.postgres.shapes import (
    COPY_RUN,
    INSERT_DELIVERY,
    INSERT_RUN,
    PUBLISH_DELIVERY,
    PUBLISH_MESSAGE,
    TRANSITION,
    TRANSITION_EVENT,
    RowShape,
)
from runlane.storage.postgres.transitions import transition_params
from runlane.types.clock import to_micros
from runlane.types.runs import RunEventType, RunFailure, RunSource, RunStatus, SubscriptionMode

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NOW_US = to_micros(NOW)

# ``x->>N AS name`` (text), ``(x->>N)::type AS name``, ``x->N AS name`` and
# ``nullif(x->N, 'null') AS name`` (jsonb): how the statements read a positional row.
_FIELD = re.compile(
    r"(?:\((?P<alias1>\w)\.x->>(?P<cast_pos>\d+)\)::(?P<cast>\w+)"
    r"|nullif\((?P<alias2>\w)\.x->(?P<null_pos>\d+), 'null'\)"
    r"|(?P<alias3>\w)\.x->(?P<text>>?)(?P<pos>\d+))"
    r"\s+AS\s+(?P<name>\w+)"
)


def _read_fields(statement: str, alias: str) -> list[tuple[int, str, str]]:
    """``(position, name, sql type)`` of each field ``statement`` reads from ``alias.x``."""
    found = []
    for m in _FIELD.finditer(statement):
        if alias not in (m["alias1"], m["alias2"], m["alias3"]):
            continue
        if m["cast"]:
            found.append((int(m["cast_pos"]), m["name"], m["cast"]))
        elif m["null_pos"]:
            found.append((int(m["null_pos"]), m["name"], "jsonb"))
        else:
            found.append((int(m["pos"]), m["name"], "text" if m["text"] else "jsonb"))
    return found


@pytest.mark.parametrize(
    ("statement", "alias", "shape"),
    [
        ("insert_runs", "r", INSERT_RUN),
        ("apply_transitions", "t", TRANSITION),
        ("apply_transitions", "e", TRANSITION_EVENT),
        ("apply_finishing_transitions", "t", TRANSITION),
        ("apply_finishing_transitions", "e", TRANSITION_EVENT),
        ("insert_deliveries", "d", INSERT_DELIVERY),
        ("publish_plain_message", "d", INSERT_DELIVERY),
        ("publish_plain_messages", "m", PUBLISH_MESSAGE),
        ("publish_plain_messages", "d", PUBLISH_DELIVERY),
    ],
)
def test_each_json_row_statement_reads_the_declared_fields_in_order(
    statement: str, alias: str, shape: RowShape
) -> None:
    read = _read_fields(QUERY_TEMPLATES[statement], alias)
    assert read == [(i, name, sql_type) for i, (name, sql_type) in enumerate(shape.fields)]


def test_copy_runs_lists_the_declared_columns_in_order() -> None:
    match = re.search(r"COPY \S+ \((?P<columns>[^)]*)\)", QUERY_TEMPLATES["copy_runs"])
    assert match is not None
    columns = [c.strip() for c in match["columns"].split(",")]
    assert columns == list(COPY_RUN.names)


def _new_run(**overrides: Any) -> NewRun:
    values: dict[str, Any] = {
        "id": "run-1",
        "task_id": "mail.send",
        "queue": "mail",
        "status": RunStatus.QUEUED,
        "payload": {"to": "a@example.com"},
        "payload_json": '{"to":"a@example.com"}',
        "run_at": NOW + timedelta(seconds=5),
        "source": RunSource(),
        "concurrency_key": "tenant-1",
        "trace_carrier": {"traceparent": "00-abc-def-01"},
    }
    return NewRun(**{**values, **overrides})


def test_the_insert_runs_encoder_writes_the_declared_fields() -> None:
    new = _new_run(
        idempotency_key="k1",
        singleton_key="s1",
        request_delivery=True,
        priority=7,
        priority_offset=210_000_000,
        rate_key="tenant-7",
    )
    batch = creation_batch("env", [new], NOW_US, None)
    (row,) = json.loads(batch.insert_params()["runs"])
    assert dict(zip(INSERT_RUN.names, row, strict=True)) == {
        "id": "run-1",
        "task_id": "mail.send",
        "queue": "mail",
        "status": "queued",
        "payload": '{"to":"a@example.com"}',
        "run_at": NOW_US + 5_000_000,
        "event_sequence": 2,
        "source": RunSource().to_json(),
        "idempotency_key": "k1",
        "singleton_key": "s1",
        "concurrency_key": "tenant-1",
        "trace_carrier": {"traceparent": "00-abc-def-01"},
        "request_delivery": True,
        "priority": 7,
        "priority_offset": 210_000_000,
        "rate_key": "tenant-7",
    }


def test_the_insert_runs_encoder_leaves_out_an_unset_rate_key() -> None:
    batch = creation_batch("env", [_new_run()], NOW_US, None)
    (row,) = json.loads(batch.insert_params()["runs"])
    # The statement reads the missing last field as NULL.
    assert len(row) == len(INSERT_RUN.names) - 1 and INSERT_RUN.names[-1] == "rate_key"


def _copy_fields(line: str) -> list[str | None]:
    """The fields of one text-format COPY line, as the server reads them."""
    escapes = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
    return [
        None if field == "\\N" else re.sub(r"\\(.)", lambda m: escapes[m.group(1)], field)
        for field in line.split("\t")
    ]


def test_the_copy_encoder_writes_the_declared_columns() -> None:
    new = _new_run(priority=-2, priority_offset=-60_000_000, rate_key="tenant-3")
    data, due = copy_text("env", [new], NOW_US)
    assert not due  # due in five seconds: nobody is woken
    (line,) = data.decode().splitlines()
    assert dict(zip(COPY_RUN.names, _copy_fields(line), strict=True)) == {
        "environment": "env",
        "id": "run-1",
        "task_id": "mail.send",
        "queue": "mail",
        "status": "queued",
        "payload": '{"to":"a@example.com"}',
        "attempt": "0",
        "failure_count": "0",
        "run_at": str(NOW_US + 5_000_000),
        "first_run_at": str(NOW_US + 5_000_000),
        "created_at": str(NOW_US),
        "updated_at": str(NOW_US),
        "event_sequence": "1",
        "source": json.dumps(RunSource().to_json(), separators=(",", ":")),
        "concurrency_key": "tenant-1",
        "trace_carrier": '{"traceparent":"00-abc-def-01"}',
        "priority": "-2",
        "priority_offset": "-60000000",
        "rate_key": "tenant-3",
    }


def test_the_copy_encoder_escapes_what_copy_reads_specially() -> None:
    awkward = "tab\there, line\nbreak, return\r, back\\slash"
    new = _new_run(
        task_id=awkward,
        payload_json=json.dumps({"text": awkward}),
        concurrency_key=None,
        trace_carrier=None,
        run_at=NOW,
    )
    data, due = copy_text("env\t2", [new], NOW_US)
    assert due
    (line,) = data.decode().split("\n")[:-1]  # one line: no raw newline inside it
    fields = dict(zip(COPY_RUN.names, _copy_fields(line), strict=True))
    assert fields["environment"] == "env\t2" and fields["task_id"] == awkward
    assert json.loads(fields["payload"] or "") == {"text": awkward}
    assert fields["concurrency_key"] is None and fields["trace_carrier"] is None


def test_the_transition_encoder_writes_the_declared_fields() -> None:
    failure = RunFailure("boom", "it broke", retryable=True)
    transition = Transition(
        run_id="run-1",
        expected_sequence=3,
        changes=RunChanges(
            RunStatus.RETRYING,
            run_at=NOW,
            result={"partial": 1},
            failure=failure,
            cancel_reason="why",
            add_failure=True,
            keep_lease=True,
            dead_letter_reason="max_attempts",
            dead_lettered_at=NOW,
            replays=2,
            reset_failures=True,
        ),
        events=(NewEvent(RunEventType.FAILED, {"attempt": 1}),),
        lease_token="token-1",
        lease_expired_by=NOW,
    )
    params = transition_params("env", [transition], NOW_US)
    (row,) = json.loads(params["transitions"])
    assert dict(zip(TRANSITION.names, row, strict=True)) == {
        "id": "run-1",
        "status": "retrying",
        "run_at": NOW_US,
        "result": {"partial": 1},
        "failure": failure.to_json(),
        "cancel_reason": "why",
        "add_failure": 1,
        "event_count": 1,
        "keep_lease": True,
        "expected_sequence": 3,
        "lease_token": "token-1",
        "lease_expired_by": NOW_US,
        "reset_failures": True,
        "replays": 2,
        "dead_letter_reason": "max_attempts",
        "dead_lettered_at": NOW_US,
        "succeeded_attempt": None,
        "progress_attempt": None,
        "progress_fraction": None,
        "progress_message": None,
        "progress_data": None,
    }
    (event,) = json.loads(params["events"])
    assert dict(zip(TRANSITION_EVENT.names, event, strict=True)) == {
        "run_id": "run-1",
        "sequence": 4,
        "type": "run.failed",
        "data": {"attempt": 1},
    }


def test_the_transition_encoder_writes_the_declared_progress_fields() -> None:
    reported = ProgressWrite("run-1", "token-1", 2, 0.5, "half", '{"page":5}')
    transition = Transition(
        run_id="run-1",
        expected_sequence=3,
        changes=RunChanges(RunStatus.SUCCEEDED),
        events=(NewEvent(RunEventType.SUCCEEDED, {"attempt": 2}),),
        lease_token="token-1",
        progress=reported,
    )
    params = transition_params("env", [transition], NOW_US)
    (row,) = json.loads(params["transitions"])
    fields = dict(zip(TRANSITION.names, row, strict=True))
    assert {name: value for name, value in fields.items() if name.startswith("progress")} == {
        "progress_attempt": 2,
        "progress_fraction": 0.5,
        "progress_message": "half",
        "progress_data": '{"page":5}',
    }


def test_a_success_the_row_implies_travels_as_its_attempt_and_not_as_an_event() -> None:
    transition = Transition(
        run_id="run-1",
        expected_sequence=2,
        changes=RunChanges(RunStatus.SUCCEEDED),
        events=(NewEvent(RunEventType.SUCCEEDED, {"attempt": 3}),),
        lease_token="token-1",
    )
    params = transition_params("env", [transition], NOW_US)
    (row,) = json.loads(params["transitions"])
    fields = dict(zip(TRANSITION.names, row, strict=True))
    assert fields["succeeded_attempt"] == 3 and fields["event_count"] == 1
    assert json.loads(params["events"]) == []


def test_the_delivery_encoder_writes_the_declared_fields() -> None:
    new = NewDelivery("run-1", "ship", "main", SubscriptionMode.ORDERED, "k", True, "k")
    row = json.loads(json.dumps(delivery_row(new)))
    assert dict(zip(INSERT_DELIVERY.names, row, strict=True)) == {
        "id": "run-1",
        "task_id": "ship",
        "queue": "main",
        "partition_key": "k",
        "subscription_mode": "ordered",
        "request_delivery": True,
        "rate_key": "k",
    }


def test_the_plain_batch_encoder_writes_the_declared_fields() -> None:
    message = NewMessage(
        id="m-1",
        topic="orders",
        payload={"n": 1.0},
        payload_json='{"n": 1.0}',
        attributes={"region": "eu"},
        envelope="{}",
        window_ends_at=NOW + timedelta(seconds=60),
        trace_carrier={"traceparent": "00-abc-def-01"},
        deliveries=(NewDelivery("run-1", "ship", "main", SubscriptionMode.NONE, None, True),),
    )
    params = plain_batch_params("env", [message], NOW_US, None)
    (row,) = json.loads(params["messages"])
    assert dict(zip(PUBLISH_MESSAGE.names, row, strict=True)) == {
        "id": "m-1",
        "topic": "orders",
        "payload": '{"n": 1.0}',
        "attributes": {"region": "eu"},
        "envelope": "{}",
        "window_ends_at": NOW_US + 60_000_000,
        "trace_carrier": {"traceparent": "00-abc-def-01"},
        "source": {"type": "publish", "topic": "orders", "message_id": "m-1"},
    }
    (delivery,) = json.loads(params["deliveries"])
    assert dict(zip(PUBLISH_DELIVERY.names, delivery, strict=True)) == {
        "message": 1,
        "id": "run-1",
        "task_id": "ship",
        "queue": "main",
        "partition_key": None,
        "subscription_mode": "none",
        "request_delivery": True,
        "rate_key": None,
    }
