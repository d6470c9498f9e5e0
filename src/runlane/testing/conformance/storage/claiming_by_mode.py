"""Claiming per subscription mode (contract 5.7), at the storage boundary.

Delivery runs are stored through ``publish_messages`` and claimed through every
claim path (``claim_due_runs``, ``claim_run``, ``apply_transitions_and_claim``, a
bounded queue's claim); each test names the MJ case it ports where there is one.
The steps defined here serve :mod:`.key_wakeups` and :mod:`.claiming_model` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from runlane import RunStatus
from runlane.model.transitions import request_cancellation
from runlane.ports.storage import (
    LeaseRequest,
    NewEvent,
    NewMessage,
    QueuePolicy,
    RunChanges,
    SettlesAndClaims,
    Storage,
    Transition,
)
from runlane.testing.conformance.storage.methods import NOW
from runlane.testing.conformance.storage.topics import (
    BOOM,
    dead_letter_run,
    delivery,
    discard_transition,
    message,
    message_store,
    replay_transition,
)
from runlane.types.runs import Run, RunEventType, SubscriptionMode

EXCLUSIVE = SubscriptionMode.EXCLUSIVE
ORDERED = SubscriptionMode.ORDERED
NONE = SubscriptionMode.NONE
MAIN = QueuePolicy("main")
#: How long the suite's claims lease a delivery.
LEASE_FOR = timedelta(seconds=30)


def lease_at(at: datetime, worker: str = "w1") -> LeaseRequest:
    """A lease for ``worker`` from ``at``, :data:`LEASE_FOR` long."""
    return LeaseRequest(worker, at + LEASE_FOR)


async def publish_each(
    store: Storage,
    environment: str,
    *deliveries: tuple[str, SubscriptionMode, str | None],
    subscription: str = "ship",
    at: datetime = NOW,
    queue: str = "main",
    request: bool = False,
) -> None:
    """One message per ``(run id, mode, key)``, in order (so sequences increase)."""
    messages: list[NewMessage] = [
        message(
            f"m-{run_id}",
            delivery(run_id, subscription, mode=mode, key=key, queue=queue, request=request),
            at=at,
        )
        for run_id, mode, key in deliveries
    ]
    outcomes = await message_store(store).publish_messages(environment, messages, at)
    assert [o.duplicate for o in outcomes] == [False] * len(messages)


async def claim_due_ids(
    store: Storage,
    environment: str,
    at: datetime = NOW,
    limit: int = 10,
    queues: Sequence[QueuePolicy] = (MAIN,),
) -> list[str]:
    """Claim through ``claim_due_runs`` at ``at``; the ids claimed, sorted."""
    runs = await store.claim_due_runs(environment, list(queues), limit, lease_at(at), at)
    return sorted(run.id for run in runs)


async def stored_run(store: Storage, environment: str, run_id: str) -> Run:
    """The run as stored; it must exist."""
    run = await store.get_run(environment, run_id)
    assert run is not None
    return run


def settle_transition(
    run: Run, changes: RunChanges, event: RunEventType, **data: Any
) -> Transition:
    """The fenced settle of leased ``run``: ``changes`` and one ``event`` with ``data``."""
    assert run.lease is not None
    return Transition(
        run.id, run.event_sequence, changes, (NewEvent(event, data),), lease_token=run.lease.token
    )


def succeed_transition(run: Run) -> Transition:
    """Leased ``run`` succeeds."""
    return settle_transition(run, RunChanges(RunStatus.SUCCEEDED), RunEventType.SUCCEEDED)


def retry_transition(run: Run, at: datetime) -> Transition:
    """Leased ``run`` failed and retries at ``at``."""
    changes = RunChanges(RunStatus.RETRYING, run_at=at, failure=BOOM, add_failure=True)
    return settle_transition(run, changes, RunEventType.RETRY_SCHEDULED, attempt=run.attempt)


def release_transition(run: Run, at: datetime) -> Transition:
    """Leased ``run`` is released until ``at`` (no failure counted)."""
    return settle_transition(run, RunChanges(RunStatus.RELEASED, run_at=at), RunEventType.RELEASED)


def dead_letter_transition(run: Run, at: datetime) -> Transition:
    """Leased ``run`` is dead-lettered at ``at``."""
    changes = RunChanges(
        RunStatus.DEAD_LETTERED,
        failure=BOOM,
        add_failure=True,
        dead_letter_reason="poison",
        dead_lettered_at=at,
    )
    return settle_transition(run, changes, RunEventType.DEAD_LETTERED, attempt=run.attempt)


def cancelled_transition(run: Run) -> Transition:
    """Leased ``run``, asked to stop, ends cancelled when its handler returns."""
    return settle_transition(run, RunChanges(RunStatus.CANCELLED), RunEventType.CANCELLED)


async def apply_one(store: Storage, environment: str, transition: Transition, at: datetime) -> None:
    """Apply ``transition``, which must succeed."""
    assert await store.apply_transitions(environment, [transition], at) == [True]


async def claim_one(store: Storage, environment: str, run_id: str, at: datetime = NOW) -> Run:
    """Claim ``run_id`` through ``claim_run``; it must be claimable."""
    run = await store.claim_run(environment, run_id, lease_at(at), at)
    assert run is not None, f"{run_id} should be claimable"
    return run


async def new_wakeups(store: Storage, environment: str) -> list[str]:
    """The runs of the delivery requests written since the last call."""
    claimed = await store.claim_outbox(environment, NOW, 100, NOW + timedelta(hours=1))
    return sorted(m.run_id for m in claimed)


# -- EXCLUSIVE --------------------------------------------------------------------------


async def test_c11_exclusive_claims_one_delivery_of_a_key_at_a_time(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(store, environment, ("d1", EXCLUSIVE, "k"), ("d2", EXCLUSIVE, "k"))
    assert await claim_due_ids(store, environment) == ["d1"]
    # d1 holds the key: no claim path takes d2 while its lease lasts.
    assert await claim_due_ids(store, environment) == []
    assert await store.claim_run(environment, "d2", lease_at(NOW), NOW) is None
    later = NOW + LEASE_FOR - timedelta(seconds=1)
    assert await claim_due_ids(store, environment, later) == []
    await apply_one(
        store, environment, succeed_transition(await stored_run(store, environment, "d1")), later
    )
    assert await claim_due_ids(store, environment, later) == ["d2"]


async def test_c12_exclusive_keys_are_claimed_concurrently(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(
        store,
        environment,
        ("a1", EXCLUSIVE, "k1"),
        ("b1", EXCLUSIVE, "k2"),
        ("a2", EXCLUSIVE, "k1"),
    )
    assert await claim_due_ids(store, environment) == ["a1", "b1"]


async def test_c13_exclusive_a_dead_letter_does_not_block_its_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(store, environment, ("d1", EXCLUSIVE, "k"), ("d2", EXCLUSIVE, "k"))
    await dead_letter_run(store, environment, "d1")
    assert await claim_due_ids(store, environment) == ["d2"]


async def test_exclusive_a_delivery_waiting_for_its_retry_does_not_hold_its_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(store, environment, ("d1", EXCLUSIVE, "k"), ("d2", EXCLUSIVE, "k"))
    first = await claim_one(store, environment, "d1")
    await apply_one(store, environment, retry_transition(first, NOW + timedelta(minutes=1)), NOW)
    assert await claim_due_ids(store, environment) == ["d2"]


async def test_keys_are_per_subscription(storage: Storage, environment: str) -> None:
    store = storage
    await publish_each(store, environment, ("a1", EXCLUSIVE, "k"), subscription="a")
    await publish_each(store, environment, ("b1", EXCLUSIVE, "k"), subscription="b")
    assert await claim_due_ids(store, environment) == ["a1", "b1"]


# -- ORDERED ----------------------------------------------------------------------------


async def test_c14_ordered_claims_only_the_head_of_a_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(
        store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"), ("d3", ORDERED, "k")
    )
    assert await store.claim_run(environment, "d2", lease_at(NOW), NOW) is None
    for expected in ("d1", "d2", "d3"):
        (claimed,) = await store.claim_due_runs(environment, [MAIN], 10, lease_at(NOW), NOW)
        assert claimed.id == expected
        assert await claim_due_ids(store, environment) == []
        await apply_one(store, environment, succeed_transition(claimed), NOW)
    assert await claim_due_ids(store, environment) == []


async def test_c15_ordered_a_head_waiting_for_its_retry_holds_its_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"))
    retry_at = NOW + timedelta(seconds=2)
    held = await claim_one(store, environment, "d1")
    await apply_one(store, environment, retry_transition(held, retry_at), NOW)
    assert await claim_due_ids(store, environment) == []
    assert await store.claim_run(environment, "d2", lease_at(NOW), NOW) is None
    assert await claim_due_ids(store, environment, retry_at) == ["d1"]


async def test_claim_run_of_a_released_ordered_head_and_its_followers(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"))
    back_at = NOW + timedelta(minutes=1)
    held = await claim_one(store, environment, "d1")
    await apply_one(store, environment, release_transition(held, back_at), NOW)
    # A released head keeps its key (5.5): its follower waits, on every claim path.
    assert await claim_due_ids(store, environment, back_at - timedelta(seconds=1)) == []
    assert await store.claim_run(environment, "d2", lease_at(back_at), back_at) is None
    assert (await claim_one(store, environment, "d1", back_at)).attempt == 2


async def test_c16_ordered_a_dead_lettered_head_halts_its_key_until_replayed(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"))
    await dead_letter_run(store, environment, "d1")
    later = NOW + timedelta(hours=1)
    assert await claim_due_ids(store, environment, later) == []
    assert await store.claim_run(environment, "d2", lease_at(later), later) is None
    await apply_one(
        store,
        environment,
        replay_transition(await stored_run(store, environment, "d1"), at=later),
        later,
    )
    (replayed,) = await store.claim_due_runs(environment, [MAIN], 10, lease_at(later), later)
    assert (replayed.id, replayed.attempt, replayed.replays) == ("d1", 2, 1)
    await apply_one(store, environment, succeed_transition(replayed), later)
    assert await claim_due_ids(store, environment, later) == ["d2"]


async def test_c17_ordered_discarding_the_dead_lettered_head_frees_its_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"))
    await dead_letter_run(store, environment, "d1")
    assert await claim_due_ids(store, environment) == []
    await apply_one(
        store, environment, discard_transition(await stored_run(store, environment, "d1")), NOW
    )
    assert await claim_due_ids(store, environment) == ["d2"]


# -- cancellation -----------------------------------------------------------------------


async def test_c25_a_cancelled_delivery_frees_its_key_when_its_handler_returns(
    storage: Storage, environment: str
) -> None:
    store = storage
    for mode, key in ((EXCLUSIVE, "e"), (ORDERED, "o")):
        await publish_each(store, environment, (f"{key}1", mode, key), (f"{key}2", mode, key))
        running = await claim_one(store, environment, f"{key}1")
        asked = request_cancellation(running, "stop")
        assert asked is not None
        await apply_one(store, environment, asked, NOW)
        # Asked to stop but still running: the key stays held until the handler returns.
        assert await claim_due_ids(store, environment) == []
        await apply_one(
            store,
            environment,
            cancelled_transition(await stored_run(store, environment, f"{key}1")),
            NOW,
        )
        assert await claim_due_ids(store, environment) == [f"{key}2"]


async def test_c26_a_cancelled_delivery_whose_worker_is_gone_frees_its_key_at_lease_expiry(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(store, environment, ("e1", EXCLUSIVE, "e"), ("e2", EXCLUSIVE, "e"))
    running = await claim_one(store, environment, "e1")
    asked = request_cancellation(running, "stop")
    assert asked is not None
    await apply_one(store, environment, asked, NOW)
    assert await claim_due_ids(store, environment) == []
    # The worker is gone: once the lease has expired the EXCLUSIVE key is free, even
    # before tick settles the cancelled delivery; it is never claimed again itself.
    expired = NOW + LEASE_FOR
    assert await claim_due_ids(store, environment, expired) == ["e2"]
    stopped = await stored_run(store, environment, "e1")
    assert stopped.status is RunStatus.CANCELLATION_REQUESTED


# -- NONE, keyless, settle-and-claim, bounded queues ------------------------------------


async def test_none_mode_and_keyless_deliveries_are_claimed_in_parallel(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(
        store,
        environment,
        ("n1", NONE, None),
        ("n2", NONE, None),
        ("x1", EXCLUSIVE, None),
        ("x2", EXCLUSIVE, None),
        ("o1", ORDERED, None),
        ("o2", ORDERED, None),
    )
    assert await claim_due_ids(store, environment) == ["n1", "n2", "o1", "o2", "x1", "x2"]


async def test_settle_and_claim_takes_the_next_delivery_of_the_key_it_frees(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(
        store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"), ("d3", ORDERED, "k")
    )
    settles = store
    assert isinstance(settles, SettlesAndClaims)
    held = await claim_one(store, environment, "d1")
    applied, claimed = await settles.apply_transitions_and_claim(
        environment, [succeed_transition(held)], NOW, [MAIN], 10, lease_at(NOW)
    )
    assert applied == [True] and [run.id for run in claimed] == ["d2"]
    # A settle that frees nothing claims nothing of the key.
    _, claimed = await settles.apply_transitions_and_claim(
        environment, [], NOW, [MAIN], 10, lease_at(NOW)
    )
    assert claimed == []


async def test_a_bounded_queue_claims_one_delivery_per_key_within_capacity(
    storage: Storage, environment: str
) -> None:
    store = storage
    bounded = QueuePolicy("main", concurrency_limit=2)
    await publish_each(
        store,
        environment,
        ("a1", EXCLUSIVE, "k1"),
        ("a2", EXCLUSIVE, "k1"),
        ("b1", ORDERED, "k2"),
        ("b2", ORDERED, "k2"),
        ("c1", EXCLUSIVE, "k3"),
    )
    assert await claim_due_ids(store, environment, queues=[bounded]) == ["a1", "b1"]
    assert await claim_due_ids(store, environment, queues=[bounded]) == []
    await apply_one(
        store, environment, succeed_transition(await stored_run(store, environment, "b1")), NOW
    )
    # One slot free: b2 (now k2's head) comes before c1; a2 still waits for a1.
    assert await claim_due_ids(store, environment, queues=[bounded]) == ["b2"]
    assert await store.claim_run(environment, "a2", lease_at(NOW), NOW, queue=bounded) is None


__all__ = [name for name in dir() if name.startswith("test_")]
