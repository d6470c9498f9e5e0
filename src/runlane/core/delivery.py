"""``execute_delivery``: run what a wakeup points at, or say why it was ignored."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from runlane.model.context import Signal
from runlane.model.queue_defs import UNKEYED
from runlane.model.rate_limiting import next_token_at, tokens_available
from runlane.ports.transport import (
    DeliveryMessage,
    DeliveryOutcome,
    DeliveryResult,
    IgnoredReason,
)
from runlane.types.clock import from_micros, to_micros
from runlane.types.ids import could_be_run_id
from runlane.types.runs import LEASED_STATUSES, Run

if TYPE_CHECKING:
    from collections.abc import Sequence

    from runlane.core.attempts import AttemptRunner
    from runlane.core.lease_keeping import LeaseSettings
    from runlane.core.queue_pauses import PausedQueues
    from runlane.core.store import StoreScope
    from runlane.ports.storage import StoresMessages
    from runlane.types.records import QueuePolicy


def _ignored(reason: IgnoredReason, run: Run | None) -> DeliveryResult:
    return DeliveryResult(DeliveryOutcome.IGNORED, run, reason)


def _why_not_runnable(store: StoreScope, run: Run) -> IgnoredReason | None:
    if run.is_terminal:
        return IgnoredReason.TERMINAL
    if run.status in LEASED_STATUSES:
        return IgnoredReason.ALREADY_LEASED
    if run.run_at > store.now():
        return IgnoredReason.NOT_DUE
    return None


async def _key_or_capacity(store: StoreScope, run: Run) -> IgnoredReason:
    """Why a due, waiting run was not claimed. A delivery with a key loses its delivery
    request here either way (``tick`` requests it again once it is claimable, 5.7.5),
    so it is never left without a wakeup."""
    if run.partition_key is not None and store.storage.capabilities.stores_messages:
        messages = cast("StoresMessages", store.storage)
        if await messages.mark_key_unavailable(store.environment, run.id, store.now()):
            return IgnoredReason.KEY_UNAVAILABLE
    return IgnoredReason.CAPACITY_UNAVAILABLE


async def _rate_limited(
    store: StoreScope, run: Run, policy: QueuePolicy | None
) -> IgnoredReason | None:
    """RATE_LIMITED when the run's partition has no token now; its delivery is then
    requested again (through the outbox) for the time a token is due for it, one
    interval per due run ahead of it after the next token, so the wakeup is neither
    lost nor spent in a busy loop."""
    if policy is None or policy.rate_limit is None:
        return None
    now = store.now()
    now_us = to_micros(now)
    # The run's own partition: its key's on a queue limited per key, else the queue's.
    key = run.rate_key if policy.rate_keyed and run.rate_key is not None else UNKEYED
    tat = await store.storage.get_rate_limit_state(store.environment, run.queue, key)
    if tokens_available(policy.rate_limit, tat, now_us) > 0:
        return None
    at = from_micros(next_token_at(policy.rate_limit, tat, now_us))
    interval = policy.rate_limit.per / policy.rate_limit.count
    await store.storage.defer_delivery(store.environment, run.id, at, interval, now)
    return IgnoredReason.RATE_LIMITED


async def execute_delivery(
    store: StoreScope,
    attempts: AttemptRunner,
    queues: Sequence[QueuePolicy],
    pauses: PausedQueues,
    message: DeliveryMessage,
    settings: LeaseSettings,
    *,
    worker_id: str,
    signal: Signal | None,
    max_attempt_duration: float | None,
) -> DeliveryResult:
    """Re-read storage, claim the run's lease (within its queue's policy among
    ``queues``), execute one attempt through ``attempts``. A wakeup for a run of a
    queue in ``pauses`` is ignored: resuming the queue requests its delivery again."""
    if message.environment != store.environment:
        return _ignored(IgnoredReason.ENVIRONMENT_MISMATCH, None)
    if not could_be_run_id(message.run_id):
        return _ignored(IgnoredReason.NOT_FOUND, None)
    run = await store.storage.get_run(store.environment, message.run_id)
    if run is None:
        return _ignored(IgnoredReason.NOT_FOUND, None)
    if run.queue != message.queue:
        return _ignored(IgnoredReason.WRONG_QUEUE, run)
    reason = _why_not_runnable(store, run)
    if reason is not None:
        return _ignored(reason, run)
    if run.queue in await pauses.current():
        return _ignored(IgnoredReason.QUEUE_PAUSED, run)
    policy = next((p for p in queues if p.name == run.queue), None)
    claimed = await store.storage.claim_run(
        store.environment,
        run.id,
        attempts.lease_request(worker_id, settings),
        store.now(),
        queue=policy,
    )
    if claimed is None:
        fresh = await store.storage.get_run(store.environment, run.id)
        if fresh is None:
            return _ignored(IgnoredReason.NOT_FOUND, None)
        why = (
            _why_not_runnable(store, fresh)
            or await _rate_limited(store, fresh, policy)
            or await _key_or_capacity(store, fresh)
        )
        return _ignored(why, fresh)
    settled = await attempts.execute(
        claimed, settings, stop=signal, max_attempt_duration=max_attempt_duration
    )
    return DeliveryResult(DeliveryOutcome.EXECUTED, settled)
