"""Statement parameters and event rows: core records in, named parameters out.

Pure functions, no I/O. Times become integer microseconds and JSON becomes text,
as the driver stores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import repeat
from typing import Any

from runlane.ports.storage import LeaseRequest, NewRun, NewRunBatch
from runlane.storage.sql.encoding import DELIVERY_REQUEST_SEQUENCE, dumps
from runlane.types.clock import from_micros, to_micros
from runlane.types.ids import new_token
from runlane.types.runs import Run, RunEventType, RunStatus
from runlane.types.slot_init import many_builder


def is_plain(new: NewRun) -> bool:
    """Whether ``new`` has neither an idempotency key nor a singleton key."""
    return new.idempotency_key is None and new.singleton_key is None


def run_from_new(environment: str, new: NewRun, now: datetime) -> Run:
    """The run exactly as storage now holds it, without reading it back."""
    return _run(environment, new, from_micros(to_micros(new.run_at)), now)


def _run(environment: str, new: NewRun, run_at: datetime, now: datetime) -> Run:
    # The required fields positionally: a call with more than 15 keyword arguments
    # compiles to one that builds a dict of them first, at several times the cost.
    return Run(
        new.id,
        environment,
        new.task_id,
        new.queue,
        new.status,
        new.payload,
        0,
        0,
        run_at,
        now,
        now,
        1 + int(new.request_delivery),
        source=new.source,
        concurrency_key=new.concurrency_key,
        rate_key=new.rate_key,
        trace_carrier=new.trace_carrier,
        priority=new.priority,
    )


def shape_end(runs: Sequence[NewRun], start: int) -> int:
    """The end of the stretch of ``runs`` from ``start`` that has the shape of
    ``runs[start]``: runs that differ at most in id and payload (keys aside)."""
    # The runs of one call share these very objects: identity answers first, without
    # the dataclass and datetime comparisons. The first run's fields are read once.
    first = runs[start]
    task_id, queue, status, run_at = first.task_id, first.queue, first.status, first.run_at
    source, concurrency_key, rate_key = first.source, first.concurrency_key, first.rate_key
    carrier, delivery = first.trace_carrier, first.request_delivery
    offset, priority = first.priority_offset, first.priority
    for stop in range(start + 1, len(runs)):
        new = runs[stop]
        if not (
            new.task_id == task_id
            and new.queue == queue
            and new.status is status
            and (new.run_at is run_at or new.run_at == run_at)
            and (new.source is source or new.source == source)
            and new.concurrency_key == concurrency_key
            and new.rate_key == rate_key
            and (new.trace_carrier is carrier or new.trace_carrier == carrier)
            and new.request_delivery == delivery
            and new.priority_offset == offset
            and new.priority == priority
        ):
            return stop
    return len(runs)


#: Runs of one batch, built at once: only the id and the payload differ.
_build_runs = many_builder(Run, ("id", "payload"))
#: What a run id may hold to be written as a JSON object key as it is: printable
#: ASCII but for the two characters JSON escapes (deleted with bytes.translate).
_PLAIN_KEY_BYTES = bytes(byte for byte in range(0x20, 0x7F) if byte not in b'"\\')
_CONTAINERS = ("{", "[")


def plain_rows(ids: Sequence[str], texts: Sequence[str]) -> str:
    """The ``:rows`` of ``insert_plain_runs_by_id`` (one JSON object, id to payload),
    or, if a payload is no JSON object or array (``json_each`` would hand it back
    decoded) or an id needs escaping, those of ``insert_plain_runs`` (``[id, payload
    text]`` pairs); :func:`plain_statement` tells the two apart."""
    joined = "".join(ids)
    if (
        all(map(str.startswith, texts, repeat(_CONTAINERS)))
        and joined.isascii()
        and not joined.encode().translate(None, _PLAIN_KEY_BYTES)
    ):
        # The payload texts are JSON already: joined, not encoded again.
        return (
            "{"
            + ",".join([f'"{run_id}":{text}' for run_id, text in zip(ids, texts, strict=True)])
            + "}"
        )
    return dumps([[run_id, text] for run_id, text in zip(ids, texts, strict=True)])


def plain_statement(rows: str) -> str:
    """The statement that takes :func:`plain_rows`' ``rows``."""
    return "insert_plain_runs_by_id" if rows.startswith("{") else "insert_plain_runs"


def plain_batch(
    environment: str, runs: Sequence[NewRun], now_us: int
) -> tuple[dict[str, Any], list[Run]]:
    """:func:`batch_params` of ``runs`` (plain, queued or scheduled, of one shape: see
    :func:`shape_end`)."""
    first = runs[0]
    batch = NewRunBatch(
        [new.id for new in runs],
        [new.payload for new in runs],
        [new.payload_json for new in runs],
        first.task_id,
        first.queue,
        first.status,
        first.run_at,
        first.source,
        first.concurrency_key,
        first.trace_carrier,
        first.rate_key,
        first.priority,
        first.priority_offset,
    )
    return batch_params(environment, batch, now_us)


def batch_params(
    environment: str, batch: NewRunBatch, now_us: int
) -> tuple[dict[str, Any], list[Run]]:
    """Parameters of ``insert_plain_runs`` (or ``insert_plain_runs_by_id``: see
    :func:`plain_statement`) for ``batch``, and its runs as storage then holds them.
    Everything shared is encoded once for the batch."""
    run_at_us = to_micros(batch.run_at)
    carrier = batch.trace_carrier
    run_params = {
        "environment": environment,
        "rows": plain_rows(batch.ids, batch.payload_texts),
        "task_id": batch.task_id,
        "queue": batch.queue,
        "status": batch.status.value,
        "run_at": run_at_us,
        "now": now_us,
        "source": dumps(batch.source.to_json()),
        "concurrency_key": batch.concurrency_key,
        "rate_key": batch.rate_key,
        "trace_carrier": dumps(carrier) if carrier is not None else None,
        "priority": batch.priority,
        "priority_offset": batch.priority_offset,
    }
    run_at, now = from_micros(run_at_us), from_micros(now_us)
    created = _build_runs(
        batch.ids,
        batch.payloads,
        environment=environment,
        task_id=batch.task_id,
        queue=batch.queue,
        status=batch.status,
        attempt=0,
        failure_count=0,
        run_at=run_at,
        created_at=now,
        updated_at=now,
        event_sequence=1,  # insert_plain_runs writes no delivery request
        source=batch.source,
        result=None,
        failure=None,
        idempotency_key=None,
        singleton_key=None,
        concurrency_key=batch.concurrency_key,
        trace_carrier=carrier,
        lease=None,
        cancel_reason=None,
        partition_key=None,
        replays=0,
        mode=None,
        message_sequence=None,
        dead_letter_reason=None,
        dead_lettered_at=None,
        rate_key=batch.rate_key,
        progress=None,
        priority=batch.priority,
    )
    return run_params, created


def insert_params(
    environment: str, new: NewRun, now_us: int, lease: LeaseRequest | None, token: str | None
) -> dict[str, Any]:
    """Parameters of ``insert_run`` and ``insert_plain_run``; RUNNING under ``lease`` if given."""
    leased = lease is not None
    return {
        "environment": environment,
        "id": new.id,
        "task_id": new.task_id,
        "queue": new.queue,
        "status": RunStatus.RUNNING.value if leased else new.status.value,
        "payload": new.payload_json,
        "attempt": 1 if leased else 0,
        "run_at": to_micros(new.run_at),
        "now": now_us,
        "event_sequence": 1 + int(leased) + int(new.request_delivery),
        "delivery_requested_at": now_us if new.request_delivery else None,
        "source": dumps(new.source.to_json()),
        "idempotency_key": new.idempotency_key,
        "singleton_key": new.singleton_key,
        "concurrency_key": new.concurrency_key,
        "trace_carrier": dumps(new.trace_carrier) if new.trace_carrier is not None else None,
        "rate_key": new.rate_key,
        "lease_owner": lease.worker_id if lease else None,
        "lease_token": token,
        "lease_expires_at": to_micros(lease.expires_at) if lease else None,
        "priority": new.priority,
        "priority_offset": new.priority_offset,
    }


def lease_params(lease: LeaseRequest, now: datetime) -> dict[str, Any]:
    """The lease parameters of the claim statements, with a fresh lease token."""
    return {
        "worker_id": lease.worker_id,
        "lease_token": new_token(),
        "lease_expires_at": to_micros(lease.expires_at),
        "now": to_micros(now),
    }


# -- event rows (parameters of insert_event) -----------------------------------------


def event_row(
    environment: str,
    run_id: str,
    sequence: int,
    type_: RunEventType,
    now_us: int,
    data: dict[str, Any],
) -> dict[str, Any]:
    """One ``insert_event`` row."""
    return {
        "environment": environment,
        "run_id": run_id,
        "sequence": sequence,
        "type": type_.value,
        "occurred_at": now_us,
        "data": dumps(data),
    }


def creation_events(
    environment: str, run: Run, now_us: int, delivery_requested: bool
) -> list[dict[str, Any]]:
    """A new run's stored events: its delivery request, where it applies (``run.created``
    is implied by the row's ``first_run_at``, and a leased run's ``run.started`` by its
    ``started_*`` columns)."""
    if delivery_requested:
        return [delivery_event(environment, run, DELIVERY_REQUEST_SEQUENCE, now_us)]
    return []


def delivery_event(environment: str, run: Run, sequence: int, now_us: int) -> dict[str, Any]:
    """``run.delivery_requested`` at ``sequence``, naming the outbox row it wrote."""
    return event_row(
        environment,
        run.id,
        sequence,
        RunEventType.DELIVERY_REQUESTED,
        now_us,
        {"queue": run.queue, "outbox_id": f"{run.id}.{sequence}"},
    )
