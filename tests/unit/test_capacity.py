"""The capacity and ownership rules both SQL drivers decide with (runlane.model.capacity)."""

from __future__ import annotations

import pytest

from runlane.model.capacity import (
    DEFAULT_RESERVATION_WINDOW,
    admit_within_capacity,
    has_capacity,
    owner_holds,
    partition_of,
    reservation_deadline,
)


def test_a_run_without_a_concurrency_key_occupies_its_queues_keyless_partition() -> None:
    assert partition_of("mail", None) == ("mail", "")
    assert partition_of("mail", "") == ("mail", "")
    assert partition_of("mail", "tenant-1") == ("mail", "tenant-1")


@pytest.mark.parametrize(
    ("occupied", "limit", "expected"), [(0, 1, True), (1, 1, False), (2, 1, False), (0, 0, False)]
)
def test_a_partition_has_capacity_only_below_its_limit(
    occupied: int, limit: int, expected: bool
) -> None:
    assert has_capacity(occupied, limit) is expected


def test_candidates_are_admitted_in_order_until_their_partition_is_full() -> None:
    candidates = [
        ("r1", "mail", "a"),
        ("r2", "mail", "a"),
        ("r3", "mail", "b"),
        ("r4", "mail", "a"),
        ("r5", "sms", None),
    ]
    admitted = admit_within_capacity(candidates, {"mail": 2, "sms": 1}, {("mail", "a"): 1})
    assert admitted == ["r1", "r3", "r5"]


def test_admitting_leaves_the_callers_counts_alone() -> None:
    occupied = {("mail", ""): 0}
    assert admit_within_capacity(
        [("r1", "mail", None), ("r2", "mail", None)], {"mail": 1}, occupied
    ) == ["r1"]
    assert occupied == {("mail", ""): 0}


def test_a_full_partition_admits_nothing_and_no_candidates_admit_nothing() -> None:
    assert admit_within_capacity([("r1", "mail", None)], {"mail": 1}, {("mail", ""): 1}) == []
    assert admit_within_capacity([], {"mail": 1}, {}) == []


def test_a_reservation_lasts_the_queues_window_or_the_default() -> None:
    now_us = 1_000_000
    assert reservation_deadline(now_us, 2.5) == now_us + 2_500_000
    assert reservation_deadline(now_us, None) == now_us + int(
        DEFAULT_RESERVATION_WINDOW * 1_000_000
    )


@pytest.mark.parametrize(
    "status", ["queued", "scheduled", "running", "retrying", "released", "cancellation_requested"]
)
def test_an_active_owner_holds_its_key_whatever_the_retention(status: str) -> None:
    assert owner_holds(status, None, now_us=10)
    assert owner_holds(status, 5, now_us=10)


def test_a_failed_owner_never_holds_its_key() -> None:
    assert not owner_holds("failed", 100, now_us=10)


@pytest.mark.parametrize("status", ["succeeded", "cancelled"])
def test_a_finished_owner_holds_its_key_until_the_retention_ends(status: str) -> None:
    assert owner_holds(status, 11, now_us=10)
    assert not owner_holds(status, 10, now_us=10)
    assert not owner_holds(status, None, now_us=10)
