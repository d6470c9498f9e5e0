"""Creating one run in fewer steps (an optional storage operation,
:class:`~runlane.ports.storage.CreatesLoneRuns`): the outcome, row and history
:meth:`~runlane.ports.storage.Storage.create_runs` gives the same run alone."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from runlane import ErrorCode, RunlaneError
from runlane.ports.storage import CreatesLoneRuns, RunFilter, Storage
from runlane.testing.conformance.storage.methods import (
    EVERY_PLAIN_OPTION,
    NOW,
    create_named,
    new_run,
)


def _creates_lone_runs(storage: Storage) -> CreatesLoneRuns:
    if not isinstance(storage, CreatesLoneRuns):
        pytest.skip("the driver does not create a lone run in fewer steps")
    return storage


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"payload": "a string", "payload_json": '"a string"'},
        EVERY_PLAIN_OPTION,
        # Not a plain row: a driver may take its general path for it.
        {"idempotency_key": "k", "idempotency_expires_at": NOW + timedelta(hours=1)},
    ],
    ids=["plain", "scalar-payload", "every-plain-option", "idempotent"],
)
async def test_a_lone_run_is_stored_as_create_runs_stores_it(
    storage: Storage, environment: str, overrides: dict[str, Any]
) -> None:
    lone = _creates_lone_runs(storage)
    overrides = {"payload": {"n": 1}, "payload_json": '{"n":1}', **overrides}
    outcome = await lone.create_lone_run(environment, new_run("lone", **overrides), NOW)
    # The same run under another id (and another key, when it has one).
    key = overrides.get("idempotency_key")
    other = {**overrides, "idempotency_key": None if key is None else f"{key}-single"}
    (single,) = await storage.create_runs(environment, [new_run("single", **other)], NOW)
    assert outcome.created and outcome.outbox == single.outbox == ()
    assert outcome.run == dataclasses.replace(single.run, id="lone", idempotency_key=key)
    assert await storage.get_run(environment, "lone") == outcome.run
    events = await storage.list_run_events(environment, "lone")
    singles = await storage.list_run_events(environment, "single")
    assert [(e.type, e.data) for e in events] == [(e.type, e.data) for e in singles]


async def test_a_lone_run_returns_the_owner_of_its_idempotency_key(
    storage: Storage, environment: str
) -> None:
    lone = _creates_lone_runs(storage)
    keyed = {"idempotency_key": "k", "idempotency_expires_at": NOW + timedelta(hours=1)}
    first = await lone.create_lone_run(environment, new_run("first", **keyed), NOW)
    again = await lone.create_lone_run(environment, new_run("again", **keyed), NOW)
    assert first.created and not again.created
    assert again.run == first.run
    listed = (await storage.list_runs(environment, RunFilter(), 10, None)).data
    assert [run.id for run in listed] == ["first"]


async def test_a_lone_run_naming_an_existing_id_is_refused_and_changes_nothing(
    storage: Storage, environment: str
) -> None:
    lone = _creates_lone_runs(storage)
    await create_named(storage, environment, "a")
    stored = await storage.get_run(environment, "a")
    with pytest.raises(RunlaneError) as refused:
        await lone.create_lone_run(environment, new_run("a", payload=2, payload_json="2"), NOW)
    assert refused.value.code is ErrorCode.STORAGE_CONFLICT
    assert await storage.get_run(environment, "a") == stored
    listed = (await storage.list_runs(environment, RunFilter(), 10, None)).data
    assert [run.id for run in listed] == ["a"]


__all__ = [name for name in dir() if name.startswith("test_")]
