"""Identifiers: non-empty strings without ':' and of bounded length; run ids are opaque."""

from __future__ import annotations

import os
import re

import pytest

from runlane import ErrorCode, RunlaneError
from runlane.types.ids import (
    MAX_IDENTIFIER_LENGTH,
    new_run_id,
    new_token,
    validate_identifier,
    validate_optional_identifier,
)


@pytest.mark.parametrize("value", ["main", "invoices.sync", "a", "emails-welcome_2", "x" * 255])
def test_valid_identifiers_are_returned_unchanged(value: str) -> None:
    assert validate_identifier(value, name="task id") == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "tenant:42",
        ":",
        "x" * (MAX_IDENTIFIER_LENGTH + 1),
        None,
        42,
        b"main",
    ],
)
def test_invalid_identifiers_are_configuration_errors(value: object) -> None:
    with pytest.raises(RunlaneError) as caught:
        validate_identifier(value, name="queue name")
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
    assert "queue name" in caught.value.message


def test_a_colon_is_rejected_because_storage_reserves_it() -> None:
    with pytest.raises(RunlaneError, match="':'"):
        validate_identifier("a:b", name="schedule id")


def test_an_optional_identifier_passes_none_through() -> None:
    assert validate_optional_identifier(None, name="concurrency_key") is None
    assert validate_optional_identifier("tenant-1", name="concurrency_key") == "tenant-1"
    with pytest.raises(RunlaneError):
        validate_optional_identifier("", name="concurrency_key")


def test_run_ids_are_unique_uuid_shaped_and_ordered_by_creation_time() -> None:
    ids = [new_run_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    shape = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
    assert all(shape.match(run_id) for run_id in ids)
    millis = [run_id.replace("-", "")[:12] for run_id in ids]
    assert millis == sorted(millis)


def test_lone_and_batched_run_ids_interleave_in_creation_order() -> None:
    # Lone ids come from a pool of random bits drawn ahead (past its end, too).
    ids = [new_run_id() for _ in range(700)] + new_run_id.many(50) + [new_run_id()]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the platform does not fork")
def test_a_forked_child_draws_run_ids_of_its_own() -> None:
    new_run_id()  # the parent's pool holds random bits for the ids to come
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        os.write(write_end, new_run_id().encode())
        os._exit(0)
    os.close(write_end)
    os.waitpid(child, 0)
    with os.fdopen(read_end) as pipe:
        childs = pipe.read()
    # The random tail (after the time and counter) would repeat the parent's otherwise.
    assert childs[-16:] != new_run_id()[-16:]


def test_run_ids_are_valid_identifiers() -> None:
    run_id = new_run_id()
    assert validate_identifier(run_id, name="run id") == run_id


def test_lease_tokens_are_unguessable_and_distinct() -> None:
    tokens = {new_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(token) == 24 for token in tokens)


def test_batched_run_ids_past_a_milliseconds_counter_move_to_the_next_millisecond() -> None:
    # 10,000 ids take at least three milliseconds' 4,096 counters, however fast.
    ids = new_run_id.many(10_000)
    shape = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
    assert all(shape.match(run_id) for run_id in ids)
    assert len(set(ids)) == len(ids) and ids == sorted(ids)
    assert len({run_id.replace("-", "")[:12] for run_id in ids}) >= 3
    # The variant digit takes each of its four values.
    assert {run_id[19] for run_id in ids} == set("89ab")
    assert new_run_id.many(0) == []
