"""Which deliveries a worker may claim: the key rules of the three modes (contract 5.7).

A reference model over plain data, for the drivers' claim SQL to be checked
against. Queue capacity (section 3) is applied by storage on top of it and is
not modelled here.

- NONE, or a keyless delivery of any mode: claimable when due.
- EXCLUSIVE: also, no delivery of its (subscription, key) holds an unexpired lease.
- ORDERED: also, it is its key's head: no delivery of its (subscription, key) with a
  lower sequence is unfinished (a head waiting for a retry holds the key; a
  dead-lettered head halts it).
- One claim takes at most one delivery per (subscription, key).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from runlane.topics.definitions import SubscriptionMode
from runlane.topics.states import DeliveryState
from runlane.types.runs import CLAIMABLE_STATUSES, UNFINISHED_STATUSES, RunStatus

KeyGroup = tuple[str, str]
"""(subscription, key): the unit exclusivity and order apply to."""


def key_group(delivery: DeliveryState) -> KeyGroup | None:
    """The delivery's (subscription, key), or ``None`` when no key rule applies to it."""
    if delivery.mode is SubscriptionMode.NONE or delivery.key is None:
        return None
    return (delivery.subscription, delivery.key)


def is_due(delivery: DeliveryState, now: datetime) -> bool:
    """Claimable by status and ``run_at``, before any key rule."""
    return delivery.status in CLAIMABLE_STATUSES and delivery.run_at <= now


def claimable_deliveries(deliveries: Iterable[DeliveryState], now: datetime) -> list[DeliveryState]:
    """Every delivery a claim at ``now`` could take on its own, in claim order (run_at, id).

    ``deliveries`` must hold every delivery of each key group it mentions: the
    rules read a key's other deliveries.
    """
    every = list(deliveries)
    leased: set[KeyGroup] = set()
    lowest_unfinished: dict[KeyGroup, int] = {}
    for delivery in every:
        group = key_group(delivery)
        if group is None:
            continue
        if delivery.holds_lease(now):
            leased.add(group)
        if delivery.status in UNFINISHED_STATUSES:
            current = lowest_unfinished.get(group)
            if current is None or delivery.sequence < current:
                lowest_unfinished[group] = delivery.sequence
    result = []
    for delivery in every:
        if not is_due(delivery, now):
            continue
        group = key_group(delivery)
        if group is not None:
            if group in leased:
                continue
            if (
                delivery.mode is SubscriptionMode.ORDERED
                and lowest_unfinished[group] < delivery.sequence
            ):
                continue
        result.append(delivery)
    result.sort(key=lambda d: (d.run_at, d.id))
    return result


def claim_batch(
    deliveries: Sequence[DeliveryState], now: datetime, limit: int
) -> list[DeliveryState]:
    """What one claim of up to ``limit`` deliveries takes: the first claimable ones,
    at most one per (subscription, key)."""
    taken: list[DeliveryState] = []
    groups: set[KeyGroup] = set()
    for delivery in claimable_deliveries(deliveries, now):
        if len(taken) >= limit:
            break
        group = key_group(delivery)
        if group is not None:
            if group in groups:
                continue
            groups.add(group)
        taken.append(delivery)
    return taken


def halted_keys(deliveries: Iterable[DeliveryState]) -> dict[KeyGroup, DeliveryState]:
    """ORDERED keys whose head is dead-lettered, with that head (5.9 ``halted_keys``)."""
    heads: dict[KeyGroup, DeliveryState] = {}
    for delivery in deliveries:
        group = key_group(delivery)
        if (
            group is None
            or delivery.mode is not SubscriptionMode.ORDERED
            or delivery.status not in UNFINISHED_STATUSES
        ):
            continue
        head = heads.get(group)
        if head is None or delivery.sequence < head.sequence:
            heads[group] = delivery
    return {group: head for group, head in heads.items() if head.status is RunStatus.DEAD_LETTERED}
