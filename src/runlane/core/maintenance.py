"""Maintenance duties run by ``tick``: each a small function, safe to run concurrently."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from runlane.core.models import TERMINAL_STATUSES, RunStatus, TickReport
from runlane.core.retry import DEFAULT_RETRY_POLICY
from runlane.core.scheduling import materialize_due_schedules
from runlane.core.transitions import LeaseExpired, settle_attempt

if TYPE_CHECKING:
    from runlane.core.runtime import Runlane

logger = logging.getLogger("runlane.maintenance")

#: Expired leases recovered per storage round trip.
LEASE_RECOVERY_BATCH = 500
#: Finished runs deleted per storage round trip while pruning.
PRUNE_BATCH = 1000


async def run_maintenance(rt: Runlane) -> TickReport:
    """Run every duty once and report what each did."""
    report = TickReport()
    report.schedules_materialized = await materialize_due_schedules(rt)
    if rt.dispatcher is not None:
        report.reservations_expired = await rt.storage.expire_dispatch_reservations(
            rt.environment, rt.clock.now()
        )
    await recover_expired_leases(rt, report)
    if rt.dispatcher is not None:
        report.deliveries_requested = await rt.dispatcher.request_due_deliveries()
        report.outbox_published, report.outbox_failed = await rt.dispatcher.publish_pending()
    report.idempotency_keys_released = await rt.storage.release_expired_idempotency_keys(
        rt.environment, rt.clock.now()
    )
    if rt.retention is not None:
        report.runs_pruned = await prune_finished_runs(rt, rt.retention)
    return report


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
            logger.info(
                "run %s: lease of %s expired; now %s",
                run.id,
                run.lease.owner if run.lease else "?",
                transition.changes.status.value,
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
