"""Contract 5.7: which deliveries a claim may take in each mode (the reference model).

The drivers' claim SQL is checked against this model; the MJ conformance case
each test mirrors is named where there is one.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runlane import RetryPolicy
from runlane.topics.claiming import claim_batch, claimable_deliveries, halted_keys
from runlane.topics.definitions import SubscriptionMode
from runlane.topics.outcomes import Complete, DeadLetterWith, RetryAfter
from runlane.topics.states import (
    DELIVERY_STATUSES,
    DeliveryState,
    apply_transition,
    discard_dead_letter,
    expire_delivery_lease,
    replay_dead_letter,
    settle_delivery,
)
from runlane.types.runs import (
    LEASED_STATUSES,
    TERMINAL_STATUSES,
    UNFINISHED_STATUSES,
    RunFailure,
    RunStatus,
)

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
LEASE = timedelta(seconds=30)
S = RunStatus
_ids = count(1)


def _delivery(
    sequence: int,
    status: RunStatus = S.QUEUED,
    *,
    mode: SubscriptionMode = SubscriptionMode.ORDERED,
    key: str | None = "k",
    subscription: str = "sub",
    run_at: datetime = NOW,
    leased_until: datetime | None = None,
) -> DeliveryState:
    if status in LEASED_STATUSES and leased_until is None:
        leased_until = NOW + LEASE
    return DeliveryState(
        id=f"d{sequence:03d}",
        subscription=subscription,
        status=status,
        mode=mode,
        key=key,
        sequence=sequence,
        run_at=run_at,
        lease_token=None if leased_until is None else f"t{next(_ids)}",
        lease_expires_at=leased_until,
    )


def _ids_of(deliveries: list[DeliveryState]) -> list[str]:
    return [d.id for d in deliveries]


def _claimable(*deliveries: DeliveryState) -> list[str]:
    return _ids_of(claimable_deliveries(deliveries, NOW))


EXCLUSIVE = SubscriptionMode.EXCLUSIVE
NONE = SubscriptionMode.NONE

# --- what every mode shares ---


def test_only_waiting_statuses_are_claimable() -> None:
    for status in DELIVERY_STATUSES:
        claimable = _claimable(_delivery(1, status, mode=NONE, key=None))
        expected = status in {S.QUEUED, S.SCHEDULED, S.RETRYING, S.RELEASED}
        assert (claimable == ["d001"]) is expected, status


def test_a_delivery_is_claimable_once_its_run_at_has_passed() -> None:
    assert _claimable(_delivery(1, run_at=NOW)) == ["d001"]
    assert _claimable(_delivery(1, run_at=NOW + timedelta(seconds=1))) == []


def test_claim_order_is_run_at_then_id() -> None:
    later = _delivery(1, mode=NONE, key=None, run_at=NOW - timedelta(seconds=1))
    earliest = _delivery(2, mode=NONE, key=None, run_at=NOW - timedelta(seconds=9))
    tie = _delivery(3, mode=NONE, key=None, run_at=NOW - timedelta(seconds=1))
    assert _claimable(tie, later, earliest) == ["d002", "d001", "d003"]


# --- NONE and keyless deliveries ---


def test_none_mode_runs_in_parallel_whatever_else_runs() -> None:
    running = _delivery(1, S.RUNNING, mode=NONE, key=None)
    assert _claimable(running, _delivery(2, mode=NONE, key=None)) == ["d002"]


def test_a_keyless_delivery_of_a_keyed_mode_has_no_key_rule() -> None:
    for mode in (EXCLUSIVE, SubscriptionMode.ORDERED):
        running = _delivery(1, S.RUNNING, mode=mode, key=None)
        parked = _delivery(2, S.DEAD_LETTERED, mode=mode, key=None)
        assert _claimable(running, parked, _delivery(3, mode=mode, key=None)) == ["d003"]


# --- EXCLUSIVE ---


def test_c11_exclusive_runs_one_delivery_per_key_at_a_time() -> None:
    first, second = _delivery(1, mode=EXCLUSIVE), _delivery(2, mode=EXCLUSIVE)
    assert _ids_of(claim_batch([first, second], NOW, limit=10)) == ["d001"]
    running = dataclasses.replace(first, status=S.RUNNING, lease_expires_at=NOW + LEASE)
    assert _claimable(running, second) == []


def test_c12_exclusive_runs_different_keys_concurrently() -> None:
    one, two = _delivery(1, mode=EXCLUSIVE, key="k1"), _delivery(2, mode=EXCLUSIVE, key="k2")
    assert _ids_of(claim_batch([one, two], NOW, limit=10)) == ["d001", "d002"]


def test_c13_exclusive_a_dead_letter_does_not_block_its_key() -> None:
    assert _claimable(_delivery(1, S.DEAD_LETTERED, mode=EXCLUSIVE), _delivery(2, mode=EXCLUSIVE))


def test_exclusive_a_delivery_waiting_for_its_retry_does_not_hold_its_key() -> None:
    waiting = _delivery(1, S.RETRYING, mode=EXCLUSIVE, run_at=NOW + timedelta(minutes=1))
    assert _claimable(waiting, _delivery(2, mode=EXCLUSIVE)) == ["d002"]


def test_exclusive_order_is_not_promised_a_later_sequence_may_go_first() -> None:
    late_run_at = _delivery(1, mode=EXCLUSIVE, run_at=NOW - timedelta(seconds=1))
    early_run_at = _delivery(2, mode=EXCLUSIVE, run_at=NOW - timedelta(seconds=5))
    assert _ids_of(claim_batch([late_run_at, early_run_at], NOW, limit=10)) == ["d002"]


def test_exclusive_a_cancellation_requested_delivery_holds_its_key_until_it_ends() -> None:
    # C25: the cancelled head frees its key when its handler returns, not before.
    stopping = _delivery(1, S.CANCELLATION_REQUESTED, mode=EXCLUSIVE)
    assert _claimable(stopping, _delivery(2, mode=EXCLUSIVE)) == []
    cancelled = dataclasses.replace(stopping, status=S.CANCELLED, lease_expires_at=None)
    assert _claimable(cancelled, _delivery(2, mode=EXCLUSIVE)) == ["d002"]


def test_exclusive_an_expired_lease_holds_nothing() -> None:
    # C26: the holder is gone; its key is free even before tick settles it.
    gone = _delivery(1, S.RUNNING, mode=EXCLUSIVE, leased_until=NOW)
    assert _claimable(gone, _delivery(2, mode=EXCLUSIVE)) == ["d002"]


def test_keys_are_per_subscription() -> None:
    running = _delivery(1, S.RUNNING, mode=EXCLUSIVE, subscription="a")
    assert _claimable(running, _delivery(2, mode=EXCLUSIVE, subscription="b")) == ["d002"]


# --- ORDERED ---


def test_c14_ordered_delivers_only_the_head_of_each_key() -> None:
    assert _claimable(_delivery(1), _delivery(2)) == ["d001"]
    assert _claimable(_delivery(1, S.SUCCEEDED), _delivery(2)) == ["d002"]


def test_ordered_the_head_is_the_lowest_sequence_not_the_earliest_run_at() -> None:
    head = _delivery(5, run_at=NOW)
    behind = _delivery(9, run_at=NOW - timedelta(hours=1))
    assert _claimable(behind, head) == ["d005"]


def test_c15_ordered_a_head_in_retry_backoff_holds_its_key() -> None:
    head = _delivery(1, S.RETRYING, run_at=NOW + timedelta(seconds=2))
    assert _claimable(head, _delivery(2)) == []
    assert _ids_of(claimable_deliveries([head, _delivery(2)], NOW + timedelta(seconds=3))) == [
        "d001"
    ]


def test_ordered_a_released_head_keeps_its_key() -> None:
    head = _delivery(1, S.RELEASED, run_at=NOW + timedelta(minutes=1))
    assert _claimable(head, _delivery(2)) == []


def test_c16_ordered_a_dead_lettered_head_halts_its_key_until_replayed() -> None:
    parked = _delivery(1, S.DEAD_LETTERED)
    assert _claimable(parked, _delivery(2)) == []
    replayed = apply_transition(parked, replay_dead_letter(parked, NOW), NOW)
    assert _claimable(replayed, _delivery(2)) == ["d001"]


def test_c17_ordered_discarding_the_dead_letter_frees_the_key() -> None:
    parked = _delivery(1, S.DEAD_LETTERED)
    discarded = apply_transition(parked, discard_dead_letter(parked, reason="bad batch"), NOW)
    assert _claimable(discarded, _delivery(2)) == ["d002"]


def test_ordered_a_cancelled_head_frees_its_key() -> None:
    assert _claimable(_delivery(1, S.CANCELLED), _delivery(2)) == ["d002"]


def test_ordered_every_unfinished_status_of_a_lower_sequence_blocks() -> None:
    for status in DELIVERY_STATUSES:
        blocked = _claimable(_delivery(1, status, run_at=NOW + timedelta(days=1)), _delivery(2))
        assert (blocked == []) is (status in UNFINISHED_STATUSES), status


def test_ordered_a_running_head_with_an_expired_lease_still_holds_its_key() -> None:
    # Only tick's settle (retry or dead letter) moves it; ordering outlives leases.
    gone = _delivery(1, S.RUNNING, leased_until=NOW - timedelta(seconds=1))
    assert _claimable(gone, _delivery(2)) == []


def test_ordered_keys_run_concurrently() -> None:
    batch = claim_batch([_delivery(1, key="a"), _delivery(2, key="b")], NOW, limit=5)
    assert _ids_of(batch) == ["d001", "d002"]


# --- one claim ---


def test_one_claim_takes_at_most_one_delivery_per_key_and_at_most_limit() -> None:
    deliveries = [
        _delivery(1, mode=EXCLUSIVE, key="a"),
        _delivery(2, mode=EXCLUSIVE, key="a"),
        _delivery(3, mode=NONE, key=None),
        _delivery(4, mode=NONE, key=None),
        _delivery(5, mode=EXCLUSIVE, key="b"),
    ]
    assert _ids_of(claim_batch(deliveries, NOW, limit=10)) == ["d001", "d003", "d004", "d005"]
    assert _ids_of(claim_batch(deliveries, NOW, limit=2)) == ["d001", "d003"]


# --- halted keys (5.9) ---


def test_halted_keys_are_ordered_keys_whose_head_is_dead_lettered() -> None:
    deliveries = [
        _delivery(1, S.SUCCEEDED, key="a"),
        _delivery(2, S.DEAD_LETTERED, key="a"),
        _delivery(3, key="a"),
        _delivery(4, S.DEAD_LETTERED, key="b", mode=EXCLUSIVE),
        _delivery(5, key="c"),
    ]
    halted = halted_keys(deliveries)
    assert {group: head.id for group, head in halted.items()} == {("sub", "a"): "d002"}


# --- properties ---

statuses = st.sampled_from(DELIVERY_STATUSES)
modes = st.sampled_from(list(SubscriptionMode))


@st.composite
def delivery_sets(draw: Any) -> list[DeliveryState]:
    deliveries = []
    for sequence in range(1, draw(st.integers(1, 12)) + 1):
        status = draw(statuses)
        mode = draw(modes)
        leased = status in LEASED_STATUSES
        deliveries.append(
            DeliveryState(
                id=f"d{sequence:03d}",
                subscription=draw(st.sampled_from(["a", "b"])),
                status=status,
                mode=mode,
                # A NONE subscription's deliveries store no key (5.2.2).
                key=None if mode is NONE else draw(st.sampled_from(["k1", "k2", None])),
                sequence=sequence,
                run_at=NOW + timedelta(seconds=draw(st.integers(-3, 3))),
                lease_token="t" if leased else None,
                lease_expires_at=(
                    NOW + timedelta(seconds=draw(st.integers(-3, 3))) if leased else None
                ),
            )
        )
    return deliveries


@given(delivery_sets(), st.integers(1, 12))
def test_a_claim_obeys_every_rule_of_5_7(deliveries: list[DeliveryState], limit: int) -> None:
    taken = claim_batch(deliveries, NOW, limit)
    assert len(taken) <= limit
    groups = [(d.subscription, d.key) for d in taken if d.mode is not NONE and d.key]
    assert len(groups) == len(set(groups)), "two deliveries of one key in one claim"
    for delivery in taken:
        assert delivery.status in {S.QUEUED, S.SCHEDULED, S.RETRYING, S.RELEASED}
        assert delivery.run_at <= NOW
        if delivery.mode is NONE or delivery.key is None:
            continue
        same_key = [
            d
            for d in deliveries
            if (d.subscription, d.key) == (delivery.subscription, delivery.key)
            and d is not delivery
        ]
        assert not any(d.holds_lease(NOW) for d in same_key)
        if delivery.mode is SubscriptionMode.ORDERED:
            assert not any(
                d.sequence < delivery.sequence and d.status in UNFINISHED_STATUSES for d in same_key
            )


@given(delivery_sets())
def test_a_claim_takes_something_whenever_something_is_claimable(
    deliveries: list[DeliveryState],
) -> None:
    claimable = claimable_deliveries(deliveries, NOW)
    taken = claim_batch(deliveries, NOW, limit=len(deliveries))
    # Every claimable delivery left out shares its key with one taken.
    taken_groups = {(d.subscription, d.key) for d in taken}
    for delivery in claimable:
        if delivery not in taken:
            assert delivery.key is not None and delivery.mode is not NONE
            assert (delivery.subscription, delivery.key) in taken_groups


# --- a simulation: workers, handlers, leases and operators over the model ---

NO_JITTER = RetryPolicy(max_attempts=2, initial_delay="1s", max_delay="1s", jitter=False)
BOOM = RunFailure(code="task_failed", message="boom", retryable=True)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([EXCLUSIVE, SubscriptionMode.ORDERED]),
    st.lists(st.sampled_from(["k1", "k2"]), min_size=1, max_size=6),
    st.lists(
        st.sampled_from(["claim", "complete", "retry", "dead_letter", "tick", "replay", "discard"]),
        max_size=60,
    ),
)
def test_simulated_workers_never_overlap_a_key_and_ordered_keys_finish_in_order(
    mode: SubscriptionMode, keys: list[str], steps: list[str]
) -> None:
    now = NOW
    tokens = count(1)
    store = {
        f"d{n:03d}": DeliveryState(
            id=f"d{n:03d}",
            subscription="sub",
            status=S.QUEUED,
            mode=mode,
            key=key,
            sequence=n,
            run_at=now,
        )
        for n, key in enumerate(keys, start=1)
    }
    finished: dict[str, list[int]] = defaultdict(list)

    def write(delivery: DeliveryState, transition: Any) -> None:
        after = apply_transition(delivery, transition, now)
        store[delivery.id] = after
        if after.status in TERMINAL_STATUSES:
            finished[after.key or ""].append(after.sequence)

    def first(status: RunStatus) -> DeliveryState | None:
        return next((d for d in store.values() if d.status is status), None)

    for step in [*steps, *["tick", "claim", "complete", "replay"] * 3 * len(keys)]:
        if step == "claim":
            for d in claim_batch(list(store.values()), now, limit=2):
                store[d.id] = dataclasses.replace(
                    d,
                    status=S.RUNNING,
                    attempt=d.attempt + 1,
                    event_sequence=d.event_sequence + 1,
                    lease_token=f"t{next(tokens)}",
                    lease_expires_at=now + LEASE,
                )
        elif step in ("complete", "retry", "dead_letter") and (held := first(S.RUNNING)):
            decision = {
                "complete": Complete(),
                "retry": RetryAfter(1.0, BOOM),
                "dead_letter": DeadLetterWith("poison", None),
            }[step]
            write(held, settle_delivery(held, decision, now))
        elif step == "tick":
            now += timedelta(seconds=31)
            for d in list(store.values()):
                if d.status is S.RUNNING and not d.holds_lease(now):
                    write(d, expire_delivery_lease(d, now, NO_JITTER))
        elif step == "replay" and (parked := first(S.DEAD_LETTERED)):
            write(parked, replay_dead_letter(parked, now))
        elif step == "discard" and (parked := first(S.DEAD_LETTERED)):
            write(parked, discard_dead_letter(parked, reason="give up"))
        leased_groups = [d.key for d in store.values() if d.holds_lease(now)]
        assert len(leased_groups) == len(set(leased_groups)), "two leases on one key"

    if mode is SubscriptionMode.ORDERED:
        for sequences in finished.values():
            assert sequences == sorted(sequences), "an ORDERED key finished out of order"
    # Nothing is lost: with operators replaying, every delivery eventually finishes.
    assert all(d.status in TERMINAL_STATUSES for d in store.values())
