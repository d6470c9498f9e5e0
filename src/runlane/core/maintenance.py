"""Maintenance duties run by ``tick`` and by workers: each a small named service, safe
to run concurrently, and isolated: one that fails is logged and counted, the others
still run. Workers run them under an elected leader, one per environment."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from runlane.core.models import TERMINAL_STATUSES, RunStatus, TickReport
from runlane.core.retry import DEFAULT_RETRY_POLICY
from runlane.core.scheduling import materialize_due_schedules
from runlane.core.transitions import LeaseExpired, settle_attempt

if TYPE_CHECKING:
    from runlane.core.context import Signal
    from runlane.core.runtime import Runlane

logger = logging.getLogger("runlane.maintenance")

#: Expired leases recovered per storage round trip.
LEASE_RECOVERY_BATCH = 500
#: Finished runs deleted per storage round trip while pruning.
PRUNE_BATCH = 1000
#: Seconds between a worker's maintenance passes (while it leads).
DEFAULT_MAINTENANCE_INTERVAL = 5.0
#: A leader that has not renewed for this many intervals has lost the lead (SQLite's
#: lease row; PostgreSQL's lock ends with the leader's connection instead).
MAINTENANCE_LEAD_INTERVALS = 3


@dataclass(frozen=True, slots=True)
class Duty:
    """One maintenance duty: what it is called in logs and in ``TickReport.failures``,
    and what it does (writing its counts into the report)."""

    name: str
    run: Callable[[Runlane, TickReport], Awaitable[None]]
    #: Only on lanes with a transport (delivery requests and the outbox).
    needs_transport: bool = False


async def _schedules(rt: Runlane, report: TickReport) -> None:
    created, failed = await materialize_due_schedules(rt)
    report.schedules_materialized += created
    if failed:
        report.failures["schedules"] = report.failures.get("schedules", 0) + failed


async def _reservations(rt: Runlane, report: TickReport) -> None:
    report.reservations_expired += await rt.storage.expire_dispatch_reservations(
        rt.environment, rt.clock.now()
    )


async def _delivery_requests(rt: Runlane, report: TickReport) -> None:
    assert rt.dispatcher is not None
    report.deliveries_requested += await rt.dispatcher.request_due_deliveries()


async def _outbox(rt: Runlane, report: TickReport) -> None:
    assert rt.dispatcher is not None
    published, failed = await rt.dispatcher.publish_pending()
    report.outbox_published += published
    report.outbox_failed += failed


async def _idempotency_keys(rt: Runlane, report: TickReport) -> None:
    report.idempotency_keys_released += await rt.storage.release_expired_idempotency_keys(
        rt.environment, rt.clock.now()
    )


async def _pruning(rt: Runlane, report: TickReport) -> None:
    if rt.retention is not None:
        report.runs_pruned += await prune_finished_runs(rt, rt.retention)


async def recover_expired_leases(rt: Runlane, report: TickReport) -> None:
    """Runs whose worker vanished: the attempt counts as failed (or the cancel completes)."""
    while True:
        now = rt.clock.now()
        expired = await rt.storage.list_expired_leases(rt.environment, now, LEASE_RECOVERY_BATCH)
        if not expired:
            return
        transitions = []
        for run in expired:
            task = rt.registry.tasks.get(run.task_id)
            policy = task.retry if task is not None else DEFAULT_RETRY_POLICY
            transitions.append(settle_attempt(run, LeaseExpired(), policy, now))
        applied = await rt.storage.apply_transitions(rt.environment, transitions, now)
        for run, transition, ok in zip(expired, transitions, applied, strict=True):
            if not ok:
                continue  # another process recovered it, or its worker came back
            if run.status is RunStatus.CANCELLATION_REQUESTED:
                report.cancellations_finished += 1
            else:
                report.leases_recovered += 1
                if rt.observers:
                    rt.observers.call("lease_expired", run)
            logger.warning(
                "run %s: lease of %s expired; now %s",
                run.id,
                run.lease.owner if run.lease else "?",
                transition.changes.status.value,
                extra={
                    "event": "run.lease_expired",
                    "run_id": run.id,
                    "task_id": run.task_id,
                    "queue": run.queue,
                    "attempt": run.attempt,
                    "worker_id": run.lease.owner if run.lease else None,
                },
            )
        if len(expired) < LEASE_RECOVERY_BATCH:
            return


async def prune_finished_runs(
    rt: Runlane, older_than_seconds: float, statuses: frozenset[RunStatus] = TERMINAL_STATUSES
) -> int:
    """Delete finished runs last updated more than ``older_than_seconds`` ago."""
    cutoff = rt.clock.now() - timedelta(seconds=older_than_seconds)
    total = 0
    ordered = sorted(statuses)
    while True:
        deleted = await rt.storage.prune_runs(rt.environment, cutoff, ordered, PRUNE_BATCH)
        total += deleted
        if deleted < PRUNE_BATCH:
            return total


#: Every duty, in the order one pass runs them.
DUTIES: tuple[Duty, ...] = (
    Duty("schedules", _schedules),
    Duty("dispatch_reservations", _reservations, needs_transport=True),
    Duty("lease_recovery", recover_expired_leases),
    Duty("delivery_requests", _delivery_requests, needs_transport=True),
    Duty("outbox_publish", _outbox, needs_transport=True),
    Duty("idempotency_keys", _idempotency_keys),
    Duty("pruning", _pruning),
)


async def run_maintenance(rt: Runlane) -> TickReport:
    """Run every duty once and report what each did.

    A duty that raises is logged (with its traceback) and counted in
    ``report.failures[duty.name]``; the pass goes on with the next one, so one
    bad schedule or a failing publish never stops lease recovery or pruning.
    """
    report = TickReport()
    for duty in DUTIES:
        if duty.needs_transport and rt.dispatcher is None:
            continue
        try:
            await duty.run(rt, report)
        except Exception:
            logger.exception("tick: duty %s failed; the other duties still run", duty.name)
            report.failures[duty.name] = report.failures.get(duty.name, 0) + 1
    if report.total() or report.failures:
        logger.info(
            "tick: %s",
            ", ".join(f"{k} {v}" for k, v in _changes(report).items()) or "failures only",
            extra={"event": "tick.finished", **_changes(report), "failures": report.failures},
        )
    return report


async def maintain_while_leading(rt: Runlane, holder: str, interval: float, stop: Signal) -> None:
    """Every ``interval`` seconds until ``stop``: contend for the environment's
    maintenance lead and, while ``holder`` has it, run one maintenance pass.

    Many workers run this side by side; only the leader's passes run, so one
    ticker per environment does the work of ``runlane tick``. A failed pass or a
    lost storage connection is logged and tried again at the next interval.
    """
    ttl = interval * MAINTENANCE_LEAD_INTERVALS
    leading = False
    try:
        while not stop.is_set():
            try:
                now_leading = await rt.storage.hold_maintenance_lead(
                    rt.environment, holder, rt.clock.now(), ttl
                )
            except Exception as error:
                logger.warning("%s: maintenance lead not known (%s); trying again", holder, error)
                now_leading = False
            if now_leading != leading:
                logger.info(
                    "%s: %s maintenance of environment %s",
                    holder,
                    "leads" if now_leading else "no longer leads",
                    rt.environment,
                )
                leading = now_leading
            if leading:
                # Through tick(), so observers see the leader's passes as ticks (the pass
                # logs what it changed itself).
                await rt.tick()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
    finally:
        if leading:
            # Hand over at once rather than after the lead expires.
            with contextlib.suppress(Exception):
                await rt.storage.release_maintenance_lead(rt.environment, holder)


def _changes(report: TickReport) -> dict[str, int]:
    """The duties' counts that are not zero, by field name."""
    return {
        name: value
        for name, value in dataclasses.asdict(report).items()
        if name != "failures" and value
    }
