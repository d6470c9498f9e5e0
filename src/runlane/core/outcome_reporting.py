"""What an attempt's end tells observers and the log.

The runner fills the observers' :class:`Attempt` report in two steps: what a failed
attempt raised, before its outcome is written (:func:`report_error`), and how it
settled, once it is (:func:`report_settled`). :func:`log_outcome` then writes the
attempt's one log line at the level its event has.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from runlane.core.delivering import Ended
from runlane.core.observing import OUTCOME_BY_STATUS, Attempt, Outcome
from runlane.model.transitions import AttemptOutcome, Failed, Released
from runlane.types.records import Transition
from runlane.types.runs import Run, RunStatus

#: Attempts log under the name they always had, which the logging guide documents.
logger = logging.getLogger("runlane.execution")

_LOG_EVENTS: dict[Outcome, tuple[str, int]] = {
    Outcome.SUCCEEDED: ("run.succeeded", logging.DEBUG),
    Outcome.RELEASED: ("run.released", logging.DEBUG),
    Outcome.RETRIED: ("run.retry_scheduled", logging.INFO),
    Outcome.CANCELLED: ("run.cancelled", logging.INFO),
    Outcome.FAILED: ("run.failed", logging.WARNING),
    # A delivery's dead letter is its failure: parked until an operator acts.
    Outcome.DEAD_LETTERED: ("run.dead_lettered", logging.WARNING),
    Outcome.LEASE_LOST: ("run.lease_lost", logging.WARNING),
}


#: Outcomes whose log line carries the error (type, code, traceback).
_FAILURES = (Outcome.FAILED, Outcome.RETRIED, Outcome.DEAD_LETTERED)


def attempt_log_fields(report: Attempt, event: str) -> dict[str, Any]:
    """The structured fields every log line of an attempt carries, for ``event``."""
    run = report.run
    return {
        "event": event,
        "run_id": run.id,
        "task_id": run.task_id,
        "queue": run.queue,
        "attempt": run.attempt,
        "worker_id": report.worker_id,
    }


def log_outcome(report: Attempt) -> None:
    """One line per attempt outcome, at the level its event has (logging.md §10)."""
    outcome = report.outcome
    if outcome is None:
        return
    event, level = _LOG_EVENTS[outcome]
    if not logger.isEnabledFor(level):
        return
    run = report.run
    extra = attempt_log_fields(report, event)
    extra["outcome"] = outcome.value
    extra["duration"] = round(report.duration, 6)
    detail = ""
    failure = report.failure
    if failure is not None and outcome in _FAILURES:
        error_type = failure.meta.get("exception_type") or failure.code
        extra["error_type"] = error_type
        extra["error_code"] = failure.code
        detail = f": {error_type}: {failure.message}"
    if report.delay_seconds is not None:
        extra["delay_seconds"] = round(report.delay_seconds, 3)
    if outcome is Outcome.RELEASED and report.release_reason:
        detail = f": {report.release_reason}"
    if outcome is Outcome.DEAD_LETTERED and report.dead_letter_reason is not None:
        extra["reason"] = report.dead_letter_reason
        detail = f": {report.dead_letter_reason}" + (f";{detail[1:]}" if detail else "")
    logger.log(
        level,
        "run %s (%s) attempt %s %s in %.3fs%s",
        run.id,
        run.task_id,
        run.attempt,
        outcome.value,
        report.duration,
        detail,
        extra=extra,
        exc_info=report.error if outcome in _FAILURES else None,
    )


def report_error(report: Attempt, outcome: AttemptOutcome | Ended) -> None:
    """What observers learn of a failed attempt before its outcome is written."""
    if type(outcome) is Failed:
        report.failure = outcome.failure
        report.error = outcome.error
    elif type(outcome) is Ended and outcome.raised:
        report.error = outcome.value  # type: ignore[assignment]


def report_settled(
    report: Attempt,
    outcome: AttemptOutcome | Ended,
    transition: Transition,
    run: Run,
    written: datetime,
    now: datetime,
) -> None:
    """What observers learn once ``outcome`` is written as ``transition`` of ``run``
    (at ``written``; ``now`` is when the transition was computed)."""
    changes = transition.changes
    report.outcome = OUTCOME_BY_STATUS.get(changes.status, Outcome.SUCCEEDED)
    report.settled_as(run, transition, written)
    if changes.run_at is not None and changes.status in (RunStatus.RETRYING, RunStatus.RELEASED):
        report.delay_seconds = max(0.0, (changes.run_at - now).total_seconds())
    if type(outcome) is Released:
        report.release_reason = outcome.reason
    if type(outcome) is Ended:
        report.failure = changes.failure
    if changes.status is RunStatus.DEAD_LETTERED:
        report.dead_letter_reason = changes.dead_letter_reason
