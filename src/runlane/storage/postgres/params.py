"""Parameters for the batch statements: core records in, column arrays out.

Pure functions, no I/O. A created run is built from the values the driver
inserts, so it equals what a later read returns without reading it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from runlane.ports.storage import (
    CreateOutcome,
    LeaseRequest,
    NewRun,
    NewWaitingRun,
    OutboxMessage,
)
from runlane.storage.sql.encoding import DELIVERY_REQUEST_SEQUENCE, dumps
from runlane.types.clock import from_micros, to_micros
from runlane.types.ids import new_token
from runlane.types.runs import Lease, Run, RunSource, RunStatus
from runlane.types.slot_init import slot_init

#: The NOTIFY channel; its payload is the environment that got due work.
WORK_CHANNEL = "runlane_work"


@slot_init
@dataclass(frozen=True, slots=True)
class CreationBatch:
    """Runs to create in one call, as the column arrays ``insert_runs`` takes."""

    environment: str
    now_us: int
    runs: Sequence[NewRun]
    #: One list per per-run parameter of ``insert_runs``, in run order.
    columns: dict[str, list[Any]]
    #: Parameters shared by every run of the batch.
    shared: dict[str, Any]
    lease: Lease | None

    @property
    def keyed(self) -> bool:
        """Whether any run carries an idempotency or singleton key (no bulk fast path)."""
        return any(r.idempotency_key is not None or r.singleton_key is not None for r in self.runs)

    def insert_params(self, indexes: Sequence[int] | None = None) -> dict[str, Any]:
        """Parameters of ``insert_runs`` for the runs at ``indexes`` (default: all): the
        runs as one JSON array of positional fields (:data:`~.shapes.INSERT_RUN`), with
        source and trace carrier spliced in as the JSON texts they already are, and the
        payload as a JSON string of its text (jsonb would renumber its floats)."""
        c = self.columns
        rows = []
        for i in range(len(self.runs)) if indexes is None else indexes:
            names = dumps([c["ids"][i], c["task_ids"][i], c["queues"][i], c["statuses"][i]])
            counts = dumps([c["run_ats"][i], c["event_sequences"][i]])
            keys = dumps(
                [c["idempotency_keys"][i], c["singleton_keys"][i], c["concurrency_keys"][i]]
            )
            # A rate key goes last, and only when set: runs of other queues omit it.
            rate_key = self.runs[i].rate_key
            rows.append(
                f"[{names[1:-1]},{dumps(c['payloads'][i])},{counts[1:-1]},{c['sources'][i]},"
                f"{keys[1:-1]},{c['trace_carriers'][i] or 'null'},"
                f"{'true' if c['request_deliveries'][i] else 'false'},"
                f"{c['priorities'][i]},{c['priority_offsets'][i]}"
                f"{'' if rate_key is None else ',' + dumps(rate_key)}]"
            )
        return {**self.shared, "runs": f"[{','.join(rows)}]"}

    def created_runs(self) -> list[Run]:
        """Every run of the batch as created: as stored."""
        now = from_micros(self.now_us)
        times: dict[datetime, datetime] = {}
        sequences = self.columns["event_sequences"]
        runs = []
        for index, new in enumerate(self.runs):
            run_at = times.get(new.run_at)
            if run_at is None:
                run_at = times[new.run_at] = _utc(new.run_at)
            runs.append(
                created_run(self.environment, new, now, run_at, sequences[index], self.lease)
            )
        return runs

    def outcomes(self) -> list[CreateOutcome]:
        """Every run of the batch as created, with its delivery request."""
        runs = self.created_runs()
        if not any(self.columns["request_deliveries"]):
            return [CreateOutcome(run, created=True) for run in runs]
        now = from_micros(self.now_us)
        outcomes = []
        for new, run in zip(self.runs, runs, strict=True):
            if not new.request_delivery:
                outcomes.append(CreateOutcome(run, created=True))
                continue
            message = OutboxMessage(
                id=f"{run.id}.{DELIVERY_REQUEST_SEQUENCE}",
                run_id=run.id,
                queue=run.queue,
                requested_at=now,
                trace_carrier=run.trace_carrier,
                attempts=0,
            )
            outcomes.append(CreateOutcome(run, created=True, outbox=(message,)))
        return outcomes

    def created(self, index: int) -> CreateOutcome:
        """The outcome of inserting run ``index`` alone."""
        single = CreationBatch(
            self.environment,
            self.now_us,
            [self.runs[index]],
            {name: [values[index]] for name, values in self.columns.items()},
            self.shared,
            self.lease,
        )
        return single.outcomes()[0]


def creation_batch(
    environment: str,
    runs: Sequence[NewRun],
    now_us: int,
    lease: LeaseRequest | None,
    outbox_claimed_until: int | None = None,
) -> CreationBatch:
    """Columns for ``runs``; with ``lease`` they start RUNNING under one fresh token (run_now)."""
    granted = (
        Lease(lease.worker_id, new_token(), _utc(lease.expires_at)) if lease is not None else None
    )
    # Runs of one call share their source and carrier objects: each is encoded once,
    # found by identity (hashing a dataclass costs more than the lookup is worth).
    sources: dict[int, str] = {}
    times: dict[datetime, int] = {}
    carriers: dict[int, str | None] = {}
    first_sequence = 1 + int(granted is not None)
    running = RunStatus.RUNNING.value if granted is not None else None
    ids: list[str] = []
    task_ids: list[str] = []
    queues: list[str] = []
    statuses: list[str] = []
    payloads: list[str] = []
    run_ats: list[int] = []
    sequences, source_texts, idempotency_keys, singleton_keys = [], [], [], []
    concurrency_keys, trace_carriers, deliveries = [], [], []
    priorities: list[int] = []
    offsets: list[int] = []
    for new in runs:
        source = sources.get(id(new.source))
        if source is None:
            source = sources[id(new.source)] = source_json(new.source)
        run_at = times.get(new.run_at)
        if run_at is None:
            run_at = times[new.run_at] = to_micros(new.run_at)
        carrier = new.trace_carrier
        if carrier is None:
            carrier_text = None
        else:
            carrier_text = carriers.get(id(carrier))
            if carrier_text is None:
                carrier_text = carriers[id(carrier)] = dumps(carrier)
        ids.append(new.id)
        task_ids.append(new.task_id)
        queues.append(new.queue)
        statuses.append(running or new.status.value)
        payloads.append(new.payload_json)
        run_ats.append(run_at)
        sequences.append(first_sequence + new.request_delivery)
        source_texts.append(source)
        idempotency_keys.append(new.idempotency_key)
        singleton_keys.append(new.singleton_key)
        concurrency_keys.append(new.concurrency_key)
        trace_carriers.append(carrier_text)
        deliveries.append(new.request_delivery)
        priorities.append(new.priority)
        offsets.append(new.priority_offset)
    expires_at = to_micros(granted.expires_at) if granted is not None else None
    columns: dict[str, list[Any]] = {
        "ids": ids, "task_ids": task_ids, "queues": queues, "statuses": statuses,
        "payloads": payloads, "run_ats": run_ats, "event_sequences": sequences,
        "sources": source_texts, "idempotency_keys": idempotency_keys,
        "singleton_keys": singleton_keys, "concurrency_keys": concurrency_keys,
        "trace_carriers": trace_carriers, "request_deliveries": deliveries,
        "priorities": priorities, "priority_offsets": offsets,
    }  # fmt: skip
    return CreationBatch(
        environment=environment,
        now_us=now_us,
        runs=runs,
        columns=columns,
        shared={
            "environment": environment,
            "now": now_us,
            "channel": WORK_CHANNEL,
            "outbox_claimed_until": outbox_claimed_until,
            "attempt": int(granted is not None),
            "lease_owner": granted.owner if granted is not None else None,
            "lease_token": granted.token if granted is not None else None,
            "lease_expires_at": expires_at,
        },
        lease=granted,
    )


def _utc(moment: datetime) -> datetime:
    """``moment`` as storage returns it: UTC, microsecond precision (as the runtime's
    own times already are)."""
    return moment if moment.tzinfo is UTC else from_micros(to_micros(moment))


def lease_params(lease: LeaseRequest, now_us: int) -> dict[str, Any]:
    """The lease a claim writes (one fresh fencing token per claim call)."""
    expires_at = to_micros(lease.expires_at)
    return {
        "worker_id": lease.worker_id,
        "lease_token": new_token(),
        "lease_expires_at": expires_at,
        "now": now_us,
    }


def copy_field(value: str | None) -> str:
    """``value`` as a field of text-format COPY: NULL as ``\\N``, and the characters
    COPY reads specially (backslash, tab, newline, carriage return) escaped."""
    if value is None:
        return "\\N"
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        value = (
            value.replace("\\", "\\\\")
            .replace("\t", "\\t")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
        )
    return value


def copy_text(environment: str, runs: Sequence[NewRun], now_us: int) -> tuple[bytes, bool]:
    """A plain batch (see :func:`plain_batch`) as ``copy_runs`` data, one text
    line per run with the columns :data:`~.shapes.COPY_RUN` declares; and whether a
    run of it is due now (so listening workers should hear of it).

    Built as one string: fields that are the same for the whole batch (task, queue,
    source, ...) are encoded once, and the server parses the text as it would a
    parameter, so the batch costs one pass over the runs and one write.
    """
    shared_fields: dict[Any, tuple[str, str]] = {}
    times: dict[datetime, int] = {}
    prefix = f"{copy_field(environment)}\t"
    now = str(now_us)
    due = False
    lines = []
    for new in runs:
        run_at = times.get(new.run_at)
        if run_at is None:
            run_at = times[new.run_at] = to_micros(new.run_at)
        # Runs of one call share task, queue, status, source, key and carrier.
        key = (
            new.task_id, new.queue, new.status, new.source, new.concurrency_key,
            id(new.trace_carrier), new.priority, new.priority_offset, new.rate_key,
        )  # fmt: skip
        shared = shared_fields.get(key)
        if shared is None:
            carrier = new.trace_carrier
            shared = shared_fields[key] = (
                f"{copy_field(new.task_id)}\t{copy_field(new.queue)}\t"
                f"{copy_field(new.status.value)}\t",
                f"{copy_field(source_json(new.source))}\t"
                f"{copy_field(new.concurrency_key)}\t"
                f"{copy_field(None if carrier is None else dumps(carrier))}\t"
                f"{new.priority}\t{new.priority_offset}\t{copy_field(new.rate_key)}\n",
            )
        if not due and new.status is RunStatus.QUEUED and run_at <= now_us:
            due = True
        lines.append(
            f"{prefix}{copy_field(new.id)}\t{shared[0]}{copy_field(new.payload_json)}\t0\t0\t"
            f"{run_at}\t{run_at}\t{now}\t{now}\t1\t{shared[1]}"
        )
    return "".join(lines).encode(), due


def created_run(
    environment: str,
    new: NewRun,
    now: datetime,
    run_at: datetime,
    event_sequence: int,
    lease: Lease | None = None,
) -> Run:
    """``new`` as its row holds it once created at ``now`` (leased when ``lease`` is given)."""
    leased = lease is not None
    # The required fields positionally: a call with more than 15 keyword arguments
    # compiles to one that builds a dict of them first, at several times the cost.
    return Run(
        new.id,
        environment,
        new.task_id,
        new.queue,
        RunStatus.RUNNING if leased else new.status,
        new.payload,
        int(leased),
        0,
        run_at,
        now,
        now,
        event_sequence,
        source=new.source,
        idempotency_key=new.idempotency_key,
        singleton_key=new.singleton_key,
        concurrency_key=new.concurrency_key,
        rate_key=new.rate_key,
        trace_carrier=dict(new.trace_carrier) if new.trace_carrier is not None else None,
        lease=lease,
        priority=new.priority,
    )


@lru_cache(maxsize=64)
def source_json(source: RunSource) -> str:
    """A run source's JSON text: the few sources of triggers and schedules recur."""
    return dumps(source.to_json())


def lone_params(environment: str, new: NewRun, now_us: int) -> dict[str, Any]:
    """Parameters of ``insert_run`` (and ``insert_run_handoff``) for one plain run (a
    lone trigger): built straight from the run, without a batch's columns."""
    carrier = new.trace_carrier
    return {
        "environment": environment,
        "now": now_us,
        "channel": WORK_CHANNEL,
        "id": new.id,
        "task_id": new.task_id,
        "queue": new.queue,
        "status": new.status.value,
        "payload": new.payload_json,
        "run_at": to_micros(new.run_at),
        "source": source_json(new.source),
        "concurrency_key": new.concurrency_key,
        "trace_carrier": None if carrier is None else dumps(carrier),
        "priority": new.priority,
        "priority_offset": new.priority_offset,
    }


def may_hand_off(new: NewRun, run_at_us: int, now_us: int) -> bool:
    """Whether a lone trigger's run (due at ``run_at_us``) may be handed to a worker
    standing by: due now and without a concurrency key (a claim would treat neither
    specially)."""
    return new.status is RunStatus.QUEUED and new.concurrency_key is None and run_at_us <= now_us


def plain_batch(runs: Sequence[NewRun]) -> bool:
    """Whether every run is a bare row (no keys or delivery request): the COPY path."""
    return not any(not plain_run(r) for r in runs)


def plain_run(new: NewRun) -> bool:
    """Whether ``new`` is a bare row (see :func:`plain_batch`): a lone trigger's check."""
    return (
        new.idempotency_key is None
        and new.singleton_key is None
        and not new.request_delivery
        and new.rate_key is None
        and not isinstance(new, NewWaitingRun)
    )


def lone_row(new: NewRun) -> bool:
    """Whether ``new`` goes alone through ``insert_run``: a bare row without a
    concurrency key (whose queue ``insert_runs`` names, migration 023)."""
    return new.concurrency_key is None and plain_run(new)


def plain_runs(environment: str, runs: Sequence[NewRun], now_us: int) -> list[Run]:
    """The runs of a plain batch written with ``copy_runs``, as stored: at event
    sequence 1 (their run.created event is implied by their rows)."""
    batch = CreationBatch(
        environment, now_us, runs, {"event_sequences": [1] * len(runs)}, {}, lease=None
    )
    return batch.created_runs()


def lone_outcome(
    environment: str, new: NewRun, now: datetime, lease: Lease | None = None
) -> CreateOutcome:
    """The outcome of a lone trigger written with ``insert_run`` at ``now``: created, at
    event sequence 1, or leased to a worker standing by, at sequence 2 (``run.started``)."""
    sequence = 1 if lease is None else 2
    run = created_run(environment, new, _utc(now), _utc(new.run_at), sequence, lease)
    return CreateOutcome(run, created=True)
