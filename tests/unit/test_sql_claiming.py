"""Claiming rules both SQL drivers share."""

from __future__ import annotations

from runlane.ports.storage import QueuePolicy
from runlane.storage.sql.claiming import split_by_capacity


def test_queues_split_into_bounded_limits_and_unbounded_names_each_once_in_order() -> None:
    queues = [
        QueuePolicy("b"),
        QueuePolicy("slow", concurrency_limit=2),
        QueuePolicy("a"),
        QueuePolicy("b"),
        QueuePolicy("one", concurrency_limit=1),
    ]
    assert split_by_capacity(queues) == ({"slow": 2, "one": 1}, ["b", "a"])


def test_no_queues_split_into_nothing() -> None:
    assert split_by_capacity([]) == ({}, [])
