"""Claiming per subscription mode (contract 5.7), at the storage boundary.

Delivery runs are stored through ``publish_messages`` and claimed through every
claim path (``claim_due_runs``, ``claim_run``, ``apply_transitions_and_claim``, a
bounded queue's claim); each test names the MJ case it ports where there is one.
A property test drives random histories (publishes, claims, settles, replays,
discards, cancellations, time passing) through the driver and checks every claim
against the reference model :func:`runlane.topics.claiming.claim_batch`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runlane import (
    DeliveryContext,
    ManualClock,
    Message,
    RunStatus,
    subscription,
    topic,
)
from runlane.model.transitions import request_cancellation
from runlane.ports.storage import (
    LeaseRequest,
    NewEvent,
    NewMessage,
    QueuePolicy,
    RunChanges,
    RunFilter,
    SettlesAndClaims,
    Storage,
    StoresMessages,
    Transition,
)
from runlane.ports.transport import DeliveryMessage, DeliveryOutcome, IgnoredReason
from runlane.testing.conformance.storage.methods import NOW, storage
from runlane.testing.conformance.storage.support import TransportFactory, make_transport_runtime
from runlane.testing.conformance.storage.topics import delivery, message
from runlane.topics.claiming import claim_batch, claimable_deliveries
from runlane.topics.states import delivery_state
from runlane.types.runs import Run, RunEventType, RunFailure, SubscriptionMode

__all__ = [
    "test_a_bounded_queue_claims_one_delivery_per_key_within_capacity",
    "test_a_requested_delivery_whose_key_turns_busy_is_woken_again_once_it_frees",
    "test_c11_exclusive_claims_one_delivery_of_a_key_at_a_time",
    "test_c12_exclusive_keys_are_claimed_concurrently",
    "test_c13_exclusive_a_dead_letter_does_not_block_its_key",
    "test_c14_ordered_claims_only_the_head_of_a_key",
    "test_c15_ordered_a_head_waiting_for_its_retry_holds_its_key",
    "test_c16_ordered_a_dead_lettered_head_halts_its_key_until_replayed",
    "test_c17_ordered_discarding_the_dead_lettered_head_frees_its_key",
    "test_c25_a_cancelled_delivery_frees_its_key_when_its_handler_returns",
    "test_c26_a_cancelled_delivery_whose_worker_is_gone_frees_its_key_at_lease_expiry",
    "test_claim_run_of_a_released_ordered_head_and_its_followers",
    "test_claims_agree_with_the_reference_model",
    "test_delivery_requests_follow_the_key_rule_one_per_key",
    "test_exclusive_a_delivery_waiting_for_its_retry_does_not_hold_its_key",
    "test_execute_delivery_ignores_a_blocked_delivery_as_key_unavailable_and_wakes_it_later",
    "test_keys_are_per_subscription",
    "test_mark_key_unavailable_clears_the_request_and_says_whether_the_key_blocks",
    "test_none_mode_and_keyless_deliveries_are_claimed_in_parallel",
    "test_settle_and_claim_takes_the_next_delivery_of_the_key_it_frees",
]

_ = (storage, make_transport_runtime)  # fixtures, shared with the other modules

EXCLUSIVE = SubscriptionMode.EXCLUSIVE
ORDERED = SubscriptionMode.ORDERED
NONE = SubscriptionMode.NONE
MAIN = QueuePolicy("main")
BOOM = RunFailure("task_failed", "it broke", retryable=True)
LEASE_FOR = timedelta(seconds=30)


def _lease(at: datetime, worker: str = "w1") -> LeaseRequest:
    return LeaseRequest(worker, at + LEASE_FOR)


def _topics(store: Storage) -> StoresMessages:
    assert store.capabilities.stores_messages
    return cast(StoresMessages, store)


async def _publish(
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
    outcomes = await _topics(store).publish_messages(environment, messages, at)
    assert [o.duplicate for o in outcomes] == [False] * len(messages)


async def _claim(
    store: Storage,
    environment: str,
    at: datetime = NOW,
    limit: int = 10,
    queues: Sequence[QueuePolicy] = (MAIN,),
) -> list[str]:
    runs = await store.claim_due_runs(environment, list(queues), limit, _lease(at), at)
    return sorted(run.id for run in runs)


async def _get(store: Storage, environment: str, run_id: str) -> Run:
    run = await store.get_run(environment, run_id)
    assert run is not None
    return run


def _settle(run: Run, changes: RunChanges, event: RunEventType, **data: Any) -> Transition:
    assert run.lease is not None
    return Transition(
        run.id, run.event_sequence, changes, (NewEvent(event, data),), lease_token=run.lease.token
    )


def _succeed(run: Run) -> Transition:
    return _settle(run, RunChanges(RunStatus.SUCCEEDED), RunEventType.SUCCEEDED)


def _retry(run: Run, at: datetime) -> Transition:
    changes = RunChanges(RunStatus.RETRYING, run_at=at, failure=BOOM, add_failure=True)
    return _settle(run, changes, RunEventType.RETRY_SCHEDULED, attempt=run.attempt)


def _release(run: Run, at: datetime) -> Transition:
    return _settle(run, RunChanges(RunStatus.RELEASED, run_at=at), RunEventType.RELEASED)


def _dead_letter(run: Run, at: datetime) -> Transition:
    changes = RunChanges(
        RunStatus.DEAD_LETTERED,
        failure=BOOM,
        add_failure=True,
        dead_letter_reason="poison",
        dead_lettered_at=at,
    )
    return _settle(run, changes, RunEventType.DEAD_LETTERED, attempt=run.attempt)


def _cancelled(run: Run) -> Transition:
    return _settle(run, RunChanges(RunStatus.CANCELLED), RunEventType.CANCELLED)


def _replay(run: Run, at: datetime) -> Transition:
    changes = RunChanges(
        RunStatus.QUEUED,
        run_at=at,
        failure=run.failure,
        replays=run.replays + 1,
        reset_failures=True,
    )
    event = NewEvent(RunEventType.REPLAYED, {"reason": None, "actor": None})
    return Transition(run.id, run.event_sequence, changes, (event,))


def _discard(run: Run) -> Transition:
    event = NewEvent(RunEventType.DISCARDED, {"reason": "obsolete", "actor": None})
    return Transition(
        run.id, run.event_sequence, RunChanges(RunStatus.DISCARDED, failure=run.failure), (event,)
    )


async def _apply(store: Storage, environment: str, transition: Transition, at: datetime) -> None:
    assert await store.apply_transitions(environment, [transition], at) == [True]


async def _dead_letter_now(store: Storage, environment: str, run_id: str) -> None:
    held = await _claim_one(store, environment, run_id)
    await _apply(store, environment, _dead_letter(held, NOW), NOW)


async def _claim_one(store: Storage, environment: str, run_id: str, at: datetime = NOW) -> Run:
    run = await store.claim_run(environment, run_id, _lease(at), at)
    assert run is not None, f"{run_id} should be claimable"
    return run


async def _wakeups(store: Storage, environment: str) -> list[str]:
    """The runs of the delivery requests written since the last call."""
    claimed = await store.claim_outbox(environment, NOW, 100, NOW + timedelta(hours=1))
    return sorted(m.run_id for m in claimed)


# -- EXCLUSIVE --------------------------------------------------------------------------


async def test_c11_exclusive_claims_one_delivery_of_a_key_at_a_time(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(store, environment, ("d1", EXCLUSIVE, "k"), ("d2", EXCLUSIVE, "k"))
    assert await _claim(store, environment) == ["d1"]
    # d1 holds the key: no claim path takes d2 while its lease lasts.
    assert await _claim(store, environment) == []
    assert await store.claim_run(environment, "d2", _lease(NOW), NOW) is None
    later = NOW + LEASE_FOR - timedelta(seconds=1)
    assert await _claim(store, environment, later) == []
    await _apply(store, environment, _succeed(await _get(store, environment, "d1")), later)
    assert await _claim(store, environment, later) == ["d2"]


async def test_c12_exclusive_keys_are_claimed_concurrently(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(
        store,
        environment,
        ("a1", EXCLUSIVE, "k1"),
        ("b1", EXCLUSIVE, "k2"),
        ("a2", EXCLUSIVE, "k1"),
    )
    assert await _claim(store, environment) == ["a1", "b1"]


async def test_c13_exclusive_a_dead_letter_does_not_block_its_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(store, environment, ("d1", EXCLUSIVE, "k"), ("d2", EXCLUSIVE, "k"))
    await _dead_letter_now(store, environment, "d1")
    assert await _claim(store, environment) == ["d2"]


async def test_exclusive_a_delivery_waiting_for_its_retry_does_not_hold_its_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(store, environment, ("d1", EXCLUSIVE, "k"), ("d2", EXCLUSIVE, "k"))
    first = await _claim_one(store, environment, "d1")
    await _apply(store, environment, _retry(first, NOW + timedelta(minutes=1)), NOW)
    assert await _claim(store, environment) == ["d2"]


async def test_keys_are_per_subscription(storage: Storage, environment: str) -> None:
    store = storage
    await _publish(store, environment, ("a1", EXCLUSIVE, "k"), subscription="a")
    await _publish(store, environment, ("b1", EXCLUSIVE, "k"), subscription="b")
    assert await _claim(store, environment) == ["a1", "b1"]


# -- ORDERED ----------------------------------------------------------------------------


async def test_c14_ordered_claims_only_the_head_of_a_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(
        store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"), ("d3", ORDERED, "k")
    )
    assert await store.claim_run(environment, "d2", _lease(NOW), NOW) is None
    for expected in ("d1", "d2", "d3"):
        (claimed,) = await store.claim_due_runs(environment, [MAIN], 10, _lease(NOW), NOW)
        assert claimed.id == expected
        assert await _claim(store, environment) == []
        await _apply(store, environment, _succeed(claimed), NOW)
    assert await _claim(store, environment) == []


async def test_c15_ordered_a_head_waiting_for_its_retry_holds_its_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"))
    retry_at = NOW + timedelta(seconds=2)
    held = await _claim_one(store, environment, "d1")
    await _apply(store, environment, _retry(held, retry_at), NOW)
    assert await _claim(store, environment) == []
    assert await store.claim_run(environment, "d2", _lease(NOW), NOW) is None
    assert await _claim(store, environment, retry_at) == ["d1"]


async def test_claim_run_of_a_released_ordered_head_and_its_followers(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"))
    back_at = NOW + timedelta(minutes=1)
    held = await _claim_one(store, environment, "d1")
    await _apply(store, environment, _release(held, back_at), NOW)
    # A released head keeps its key (5.5): its follower waits, on every claim path.
    assert await _claim(store, environment, back_at - timedelta(seconds=1)) == []
    assert await store.claim_run(environment, "d2", _lease(back_at), back_at) is None
    assert (await _claim_one(store, environment, "d1", back_at)).attempt == 2


async def test_c16_ordered_a_dead_lettered_head_halts_its_key_until_replayed(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"))
    await _dead_letter_now(store, environment, "d1")
    later = NOW + timedelta(hours=1)
    assert await _claim(store, environment, later) == []
    assert await store.claim_run(environment, "d2", _lease(later), later) is None
    await _apply(store, environment, _replay(await _get(store, environment, "d1"), later), later)
    (replayed,) = await store.claim_due_runs(environment, [MAIN], 10, _lease(later), later)
    assert (replayed.id, replayed.attempt, replayed.replays) == ("d1", 2, 1)
    await _apply(store, environment, _succeed(replayed), later)
    assert await _claim(store, environment, later) == ["d2"]


async def test_c17_ordered_discarding_the_dead_lettered_head_frees_its_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"))
    await _dead_letter_now(store, environment, "d1")
    assert await _claim(store, environment) == []
    await _apply(store, environment, _discard(await _get(store, environment, "d1")), NOW)
    assert await _claim(store, environment) == ["d2"]


# -- cancellation -----------------------------------------------------------------------


async def test_c25_a_cancelled_delivery_frees_its_key_when_its_handler_returns(
    storage: Storage, environment: str
) -> None:
    store = storage
    for mode, key in ((EXCLUSIVE, "e"), (ORDERED, "o")):
        await _publish(store, environment, (f"{key}1", mode, key), (f"{key}2", mode, key))
        running = await _claim_one(store, environment, f"{key}1")
        asked = request_cancellation(running, "stop")
        assert asked is not None
        await _apply(store, environment, asked, NOW)
        # Asked to stop but still running: the key stays held until the handler returns.
        assert await _claim(store, environment) == []
        await _apply(store, environment, _cancelled(await _get(store, environment, f"{key}1")), NOW)
        assert await _claim(store, environment) == [f"{key}2"]


async def test_c26_a_cancelled_delivery_whose_worker_is_gone_frees_its_key_at_lease_expiry(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(store, environment, ("e1", EXCLUSIVE, "e"), ("e2", EXCLUSIVE, "e"))
    running = await _claim_one(store, environment, "e1")
    asked = request_cancellation(running, "stop")
    assert asked is not None
    await _apply(store, environment, asked, NOW)
    assert await _claim(store, environment) == []
    # The worker is gone: once the lease has expired the EXCLUSIVE key is free, even
    # before tick settles the cancelled delivery; it is never claimed again itself.
    expired = NOW + LEASE_FOR
    assert await _claim(store, environment, expired) == ["e2"]
    stopped = await _get(store, environment, "e1")
    assert stopped.status is RunStatus.CANCELLATION_REQUESTED


# -- NONE, keyless, settle-and-claim, bounded queues ------------------------------------


async def test_none_mode_and_keyless_deliveries_are_claimed_in_parallel(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(
        store,
        environment,
        ("n1", NONE, None),
        ("n2", NONE, None),
        ("x1", EXCLUSIVE, None),
        ("x2", EXCLUSIVE, None),
        ("o1", ORDERED, None),
        ("o2", ORDERED, None),
    )
    assert await _claim(store, environment) == ["n1", "n2", "o1", "o2", "x1", "x2"]


async def test_settle_and_claim_takes_the_next_delivery_of_the_key_it_frees(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(
        store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"), ("d3", ORDERED, "k")
    )
    settles = store
    assert isinstance(settles, SettlesAndClaims)
    held = await _claim_one(store, environment, "d1")
    applied, claimed = await settles.apply_transitions_and_claim(
        environment, [_succeed(held)], NOW, [MAIN], 10, _lease(NOW)
    )
    assert applied == [True] and [run.id for run in claimed] == ["d2"]
    # A settle that frees nothing claims nothing of the key.
    _, claimed = await settles.apply_transitions_and_claim(
        environment, [], NOW, [MAIN], 10, _lease(NOW)
    )
    assert claimed == []


async def test_a_bounded_queue_claims_one_delivery_per_key_within_capacity(
    storage: Storage, environment: str
) -> None:
    store = storage
    bounded = QueuePolicy("main", concurrency_limit=2)
    await _publish(
        store,
        environment,
        ("a1", EXCLUSIVE, "k1"),
        ("a2", EXCLUSIVE, "k1"),
        ("b1", ORDERED, "k2"),
        ("b2", ORDERED, "k2"),
        ("c1", EXCLUSIVE, "k3"),
    )
    assert await _claim(store, environment, queues=[bounded]) == ["a1", "b1"]
    assert await _claim(store, environment, queues=[bounded]) == []
    await _apply(store, environment, _succeed(await _get(store, environment, "b1")), NOW)
    # One slot free: b2 (now k2's head) comes before c1; a2 still waits for a1.
    assert await _claim(store, environment, queues=[bounded]) == ["b2"]
    assert await store.claim_run(environment, "a2", _lease(NOW), NOW, queue=bounded) is None


# -- transport lanes (5.7.5) ------------------------------------------------------------


async def test_mark_key_unavailable_clears_the_request_and_says_whether_the_key_blocks(
    storage: Storage, environment: str
) -> None:
    store = storage
    topics = _topics(store)
    await _publish(
        store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"), ("t1", NONE, None),
        request=True,
    )  # fmt: skip
    # Only the head and the keyless delivery were claimable at publish: they got requests.
    assert await _wakeups(store, environment) == ["d1", "t1"]
    assert await topics.mark_key_unavailable(environment, "d2", NOW) is True
    assert await topics.mark_key_unavailable(environment, "d1", NOW) is False
    assert await topics.mark_key_unavailable(environment, "t1", NOW) is False
    assert await topics.mark_key_unavailable(environment, "missing", NOW) is False
    # d1 lost its request (it is claimable, so tick requests it again); d2 had none and
    # is still blocked; t1 keeps its request.
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 1
    assert await _wakeups(store, environment) == ["d1"]


async def test_delivery_requests_follow_the_key_rule_one_per_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await _publish(
        store,
        environment,
        ("e1", EXCLUSIVE, "e"),
        ("e2", EXCLUSIVE, "e"),
        ("o1", ORDERED, "o"),
        ("o2", ORDERED, "o"),
        ("n1", NONE, None),
    )
    # Tick's search requests one delivery per key, and each run once.
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 3
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 0
    assert await _wakeups(store, environment) == ["e1", "n1", "o1"]
    e1 = await _claim_one(store, environment, "e1")
    o1 = await _claim_one(store, environment, "o1")
    # While e1 and o1 run, neither key gets another request.
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 0
    await _apply(store, environment, _succeed(e1), NOW)
    await _apply(store, environment, _dead_letter(o1, NOW), NOW)
    # e's key is free: e2 is requested; o is halted by its dead-lettered head.
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 1
    assert await _wakeups(store, environment) == ["e2"]
    await _apply(store, environment, _discard(await _get(store, environment, "o1")), NOW)
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 1
    assert await _wakeups(store, environment) == ["o2"]


async def test_execute_delivery_ignores_a_blocked_delivery_as_key_unavailable_and_wakes_it_later(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    handled: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        handled.append(message.payload["n"])

    orders = topic("orders")
    keyed = subscription("keyed", topic=orders, handler=handle, mode=ORDERED, key="customer")
    rl, transport = await make_transport_runtime(
        [], clock=clock, topics=[orders], subscriptions=[keyed]
    )
    first = await rl.publish(orders, {"n": 1}, attributes={"customer": "c1"})
    second = await rl.publish(orders, {"n": 2}, attributes={"customer": "c1"})
    (head,), (follower,) = first.runs, second.runs
    # Only the head was claimable at publish: only it got a wakeup.
    assert [a.message.run_id for a in transport.published] == [head.id]
    # A wakeup for the follower anyway (a stale or duplicated one) is acknowledged
    # without running, and its delivery request is cleared.
    stray = DeliveryMessage(environment=rl.environment, run_id=follower.id, queue=follower.queue)
    ignored = await rl.execute_delivery(stray)
    assert (ignored.outcome, ignored.reason) == (
        DeliveryOutcome.IGNORED, IgnoredReason.KEY_UNAVAILABLE,
    )  # fmt: skip
    assert (await rl.runs.get(follower.id)).status is RunStatus.QUEUED
    assert (await rl.tick()).outbox_published == 0  # the head holds the key
    executed = await rl.execute_delivery(transport.published[0].message)
    assert executed.executed and handled == [1]
    # The key is free: the next tick wakes the follower, which then runs.
    clock.advance("1s")
    await rl.tick()
    assert [a.message.run_id for a in transport.published] == [head.id, follower.id]
    assert (await rl.execute_delivery(transport.published[1].message)).executed
    assert handled == [1, 2]


async def test_a_requested_delivery_whose_key_turns_busy_is_woken_again_once_it_frees(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    inner: list[Any] = []
    holder: list[Any] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        if message.payload["n"] == 1:
            # While this delivery holds the key, the other one's wakeup arrives.
            rl, transport = holder
            inner.append(await rl.execute_delivery(transport.published[1].message))

    orders = topic("orders")
    keyed = subscription("keyed", topic=orders, handler=handle, mode=EXCLUSIVE, key="customer")
    rl, transport = await make_transport_runtime(
        [], clock=clock, topics=[orders], subscriptions=[keyed]
    )
    holder.extend([rl, transport])
    first = await rl.publish(orders, {"n": 1}, attributes={"customer": "c1"})
    second = await rl.publish(orders, {"n": 2}, attributes={"customer": "c1"})
    # Both were claimable when published (nothing held the key): both got a wakeup.
    assert [a.message.run_id for a in transport.published] == [
        first.runs[0].id, second.runs[0].id,
    ]  # fmt: skip
    assert (await rl.execute_delivery(transport.published[0].message)).executed
    (blocked,) = inner
    assert blocked.reason is IgnoredReason.KEY_UNAVAILABLE
    # Its request was cleared when it was ignored, so tick requests it again.
    clock.advance("1s")
    assert (await rl.tick()).outbox_published == 1
    again = transport.published[-1].message
    assert again.run_id == second.runs[0].id
    assert (await rl.execute_delivery(again)).executed
    assert (await rl.runs.get(second.runs[0].id)).status is RunStatus.SUCCEEDED


# -- the reference model ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Step:
    kind: str
    target: int = 0
    arg: int = 0


_ACTIONS = [
    "claim_run", "succeed", "retry", "release", "dead_letter", "replay", "discard", "cancel",
    "cancelled",
]  # fmt: skip
_publish_step = st.builds(
    _Step,
    st.just("publish"),
    st.integers(0, 5),  # subscription and mode: _SUBSCRIPTIONS[n % 2], _MODES[n // 2]
    st.sampled_from([0, 0, 1, 2]),  # the key: _KEYS[n], mostly one key so deliveries meet
)
_action_step = st.builds(_Step, st.sampled_from(_ACTIONS), st.integers(0, 30), st.integers(0, 4))
_claim_step = st.builds(_Step, st.just("claim"), st.just(0), st.integers(1, 5))
_time_step = st.builds(_Step, st.just("time"), st.just(0), st.integers(1, 40))
# Weighted towards publishing and claiming, so keys fill up and contend.
_steps = st.one_of(
    _publish_step, _publish_step, _claim_step, _claim_step, _action_step, _action_step, _time_step
)

_SUBSCRIPTIONS = ("a", "b")
_MODES = (EXCLUSIVE, ORDERED, NONE)
_KEYS = ("k1", "k2", None)


async def _run_history(store: Storage, environment: str, steps: list[_Step]) -> None:
    now = NOW
    ids: list[str] = []
    topics = _topics(store)
    for number, step in enumerate(steps):
        if step.kind == "publish":
            subscription = _SUBSCRIPTIONS[step.target % 2]
            mode = _MODES[step.target // 2]
            key = None if mode is NONE else _KEYS[step.arg]
            run_id = f"d{len(ids):03d}"
            published = message(
                f"m-{environment}-{run_id}",
                delivery(run_id, subscription, mode=mode, key=key),
                at=now,
            )
            await topics.publish_messages(environment, [published], now)
            ids.append(run_id)
            continue
        if step.kind == "time":
            now += timedelta(seconds=step.arg)
            continue
        if step.kind == "claim":
            runs = (await store.list_runs(environment, RunFilter(), 200, None)).data
            expected = claim_batch([delivery_state(r) for r in runs], now, step.arg)
            claimed = await store.claim_due_runs(
                environment, [MAIN], step.arg, _lease(now, f"w{number}"), now
            )
            # Which runs, not the order they come back in.
            assert sorted(r.id for r in claimed) == sorted(d.id for d in expected), (now, runs)
            continue
        if not ids:
            continue
        run = await _get(store, environment, ids[step.target % len(ids)])
        await _act(store, environment, run, step, now)


async def _act(store: Storage, environment: str, run: Run, step: _Step, now: datetime) -> None:
    """One operator or worker action on ``run`` where its status allows it (compare-and-set
    refusals are fine: the action simply does not happen)."""
    later = now + timedelta(seconds=step.arg * 3)
    transition: Transition | None = None
    if step.kind == "claim_run":
        runs = (await store.list_runs(environment, RunFilter(), 200, None)).data
        alone = {d.id for d in claimable_deliveries([delivery_state(r) for r in runs], now)}
        claimed = await store.claim_run(environment, run.id, _lease(now), now)
        assert (claimed is not None) == (run.id in alone), (run.id, now, runs)
        return
    if run.status is RunStatus.RUNNING and run.lease is not None:
        if step.kind == "succeed":
            transition = _succeed(run)
        elif step.kind == "retry":
            transition = _retry(run, later)
        elif step.kind == "release":
            transition = _release(run, later)
        elif step.kind == "dead_letter":
            transition = _dead_letter(run, now)
        elif step.kind == "cancelled":
            transition = _cancelled(run)
        elif step.kind == "cancel":
            transition = request_cancellation(run, "stop")
    elif run.status is RunStatus.CANCELLATION_REQUESTED and step.kind == "cancelled":
        transition = _cancelled(run)
    elif run.status is RunStatus.DEAD_LETTERED and step.kind in ("replay", "discard"):
        transition = _replay(run, now) if step.kind == "replay" else _discard(run)
    elif step.kind == "cancel" and run.status in (
        RunStatus.QUEUED,
        RunStatus.RETRYING,
        RunStatus.RELEASED,
    ):
        transition = request_cancellation(run, "stop")
    if transition is not None:
        await store.apply_transitions(environment, [transition], now)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_steps, min_size=1, max_size=60))
async def test_claims_agree_with_the_reference_model(
    storage: Storage, environment: str, steps: list[_Step]
) -> None:
    # Each example gets an environment of its own: examples share the fixture's store.
    await _run_history(storage, f"{environment}-{uuid.uuid4().hex[:8]}", steps)
