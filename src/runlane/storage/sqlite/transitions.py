"""Applying state transitions: compare-and-set each run (with the progress a settled
attempt carries), then append its events."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from runlane.model.dependencies import SETTLED_STATUSES
from runlane.ports.storage import Transition
from runlane.storage.sql.encoding import dumps, micros_or_none
from runlane.storage.sql.implied import implied_success_attempt, started_event_data
from runlane.storage.sqlite.dependencies import settle_dependents
from runlane.storage.sqlite.params import event_row
from runlane.storage.sqlite.queries import NUMBERED, QUERIES
from runlane.types.records import ProgressWrite
from runlane.types.runs import CLAIMABLE_STATUSES, RunEventType

#: A string as JSON text (the encoder's fast path for a ``str``).
_quote = json.JSONEncoder(ensure_ascii=False).encode


def apply_transitions(
    cur: sqlite3.Cursor, environment: str, transitions: Sequence[Transition], now_us: int
) -> list[bool]:
    """Compare-and-set each transition; the events of the applied ones go in one batch,
    but for those the row implies (migration 016): a success is kept on the row, and a
    start the row implied is stored when its run becomes claimable again. The progress
    a transition carries is written by its compare-and-set, on the run's row."""
    plain, with_progress = NUMBERED["apply_transition"], NUMBERED["apply_progress_transition"]
    insert = NUMBERED["insert_event"]
    applied: list[bool] = []
    events: list[dict[str, Any]] = []
    starts: list[dict[str, Any]] = []
    depended_on: list[str] = []
    for transition in transitions:
        params = transition_params(environment, transition, now_us)
        settle = plain if transition.progress is None else with_progress
        query, values = settle.sql, settle.values
        row = cur.execute(query, values(params)).fetchone()
        if row is None and params["settles_alone"]:
            # Either the compare-and-set failed, or runs wait for this one: try again
            # without the condition (the write lock is held: nothing else changed).
            params["settles_alone"] = 0
            row = cur.execute(query, values(params)).fetchone()
            if row is not None:
                depended_on.append(transition.run_id)
        applied.append(row is not None)
        if row is None:
            continue
        if row[1] is not None and transition.changes.status in CLAIMABLE_STATUSES:
            starts.append(stored_start(cur, environment, transition.run_id))
        if not row[0]:
            events += transition_events(environment, transition, now_us)
    if starts:
        cur.executemany(QUERIES["insert_event_unless_stored"], starts)
    cur.executemany(insert.sql, map(insert.values, events))
    if depended_on:
        settle_dependents(cur, environment, depended_on, now_us)
    return applied


def stored_start(cur: sqlite3.Cursor, environment: str, run_id: str) -> dict[str, Any]:
    """The ``run.started`` event the run's row implies, as an ``insert_event`` row,
    exactly as the row implied it (read again: runs made claimable are few)."""
    row = cur.execute(QUERIES["read_start"], {"environment": environment, "id": run_id}).fetchone()
    return event_row(
        environment,
        run_id,
        row["started_sequence"],
        RunEventType.STARTED,
        row["started_at"],
        started_event_data(row["attempt"], row["started_by"], row["started_lease_expires_at"]),
    )


def transition_params(environment: str, transition: Transition, now_us: int) -> dict[str, Any]:
    """Parameters of ``apply_transition``: the changes and the compare-and-set condition
    (and of ``apply_progress_transition``, with the progress, when it carries some)."""
    changes = transition.changes
    params: dict[str, Any] = {
        "environment": environment,
        "id": transition.run_id,
        "status": changes.status.value,
        "run_at": micros_or_none(changes.run_at),
        "result": dumps(changes.result) if changes.result is not None else None,
        "failure": dumps(changes.failure.to_json()) if changes.failure is not None else None,
        "cancel_reason": changes.cancel_reason,
        "add_failure": int(changes.add_failure),
        "reset_failures": int(changes.reset_failures),
        "replays": changes.replays,
        "dead_letter_reason": changes.dead_letter_reason,
        "dead_lettered_at": micros_or_none(changes.dead_lettered_at),
        "event_count": len(transition.events),
        "now": now_us,
        "keep_lease": int(changes.keep_lease),
        "expected_sequence": transition.expected_sequence,
        "lease_token": transition.lease_token,
        "lease_expired_by": micros_or_none(transition.lease_expired_by),
        # A settle is written on the first try only when no run depends on this one.
        "settles_alone": int(changes.status in SETTLED_STATUSES),
        "succeeded_attempt": implied_success_attempt(transition),
    }
    progress = transition.progress
    if progress is not None:
        # apply_progress_transition's: the settled attempt's last progress.
        params["progress"] = progress_json(progress, now_us)
    return params


def progress_json(progress: ProgressWrite, now_us: int) -> str:
    """The ``progress`` column's value for a settle that carries ``progress``: migration
    017's JSON array of the attempt, fraction, message, data and time of the value.

    The fraction is finite (``check_progress``), so its ``repr`` is a JSON number;
    ``data_json`` is JSON text already."""
    # Unpacked: a named tuple's fields are descriptors no attribute cache serves.
    _, _, attempt, fraction, message, data_json = progress
    quoted = "null" if message is None else _quote(message)
    return f"[{attempt},{fraction!r},{quoted},{data_json or 'null'},{now_us}]"


def transition_events(
    environment: str, transition: Transition, now_us: int
) -> list[dict[str, Any]]:
    """The events a transition appends, numbered on from its expected sequence."""
    return [
        event_row(
            environment,
            transition.run_id,
            transition.expected_sequence + offset,
            event.type,
            now_us,
            event.data,
        )
        for offset, event in enumerate(transition.events, start=1)
    ]
