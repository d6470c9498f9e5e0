"""Which events a run's row implies instead of storing them, on the write side.

A run's row implies its ``run.created`` event, its latest ``run.started`` (the
``started_*`` columns, written by the claim) and, when that attempt succeeded, its
``run.succeeded`` (``succeeded_*``): a drained run writes one row, not three.
:func:`~runlane.storage.sql.rows.run_events_from_rows` reads them back. A start is
stored as a row by the transition that makes its run claimable again, before the
next claim overwrites the columns.
"""

from __future__ import annotations

from typing import Any

from runlane.ports.storage import Transition
from runlane.types.clock import from_micros
from runlane.types.runs import RunEventType, RunStatus


def started_event_data(attempt: int, worker_id: str, lease_expires_us: int) -> dict[str, Any]:
    """The data of the ``run.started`` event a row's ``started_*`` columns imply, the
    same whether it is read back as implied or stored when the run is claimable again
    (a stored event wins over an implied one of its sequence, so the two must agree)."""
    return {
        "attempt": attempt,
        "worker_id": worker_id,
        "lease_expires_at": from_micros(lease_expires_us).isoformat(),
    }


def implied_success_attempt(transition: Transition) -> int | None:
    """The attempt of the ``run.succeeded`` event the run's row may imply in place of
    ``transition``'s only event, or ``None`` when the transition's events are stored.

    Only a settle to SUCCEEDED whose sole event is ``run.succeeded`` with exactly
    ``{"attempt": n}`` qualifies; the driver implies it when ``n`` is the row's attempt
    and stores the event otherwise.
    """
    events = transition.events
    if len(events) != 1 or transition.changes.status is not RunStatus.SUCCEEDED:
        return None
    event = events[0]
    if event.type is not RunEventType.SUCCEEDED or len(event.data) != 1:
        return None
    attempt = event.data.get("attempt")
    return attempt if type(attempt) is int else None
