"""slot_init: the cheaper __init__ of frozen records behaves as the one dataclasses made;
many_builder builds many of them at once, the same as their __init__ does."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from runlane.core.producing import Prepared, TriggerPlan
from runlane.storage.postgres.params import CreationBatch
from runlane.types.records import (
    CreateOutcome,
    LeaseRequest,
    NewEvent,
    NewRun,
    OutboxMessage,
    RunChanges,
    Transition,
)
from runlane.types.runs import Lease, Run, RunEventType, RunSource, RunStatus
from runlane.types.slot_init import many_builder, slot_init

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Plain:
    """A frozen record as dataclasses makes it."""

    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)
    d: dict[str, Any] | None = None


@slot_init
@dataclass(frozen=True, slots=True)
class Fast:
    """Plain's twin, with the cheaper __init__."""

    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)
    d: dict[str, Any] | None = None


def test_same_values_defaults_and_factories_as_the_dataclass_init() -> None:
    for args, kwargs in [((1,), {}), ((1, "x"), {"d": {"k": 1}}), ((), {"a": 2, "c": [3]})]:
        made, reference = Fast(*args, **kwargs), Plain(*args, **kwargs)
        assert dataclasses.astuple(made) == dataclasses.astuple(reference)
    # Each instance gets its own default from the factory, as with dataclasses.
    assert Fast(1).c is not Fast(1).c


def test_same_signature_errors_as_the_dataclass_init() -> None:
    assert list(inspect.signature(Fast).parameters) == list(inspect.signature(Plain).parameters)
    for args, kwargs in [((), {}), ((1,), {"a": 2}), ((1,), {"e": 1}), ((1, "b", [], None, 5), {})]:
        with pytest.raises(TypeError) as reference:
            Plain(*args, **kwargs)
        with pytest.raises(TypeError) as made:
            Fast(*args, **kwargs)
        assert str(made.value).split("() ")[-1] == str(reference.value).split("() ")[-1]


def test_records_stay_frozen_equal_hashable_copyable_and_picklable() -> None:
    run = Run(
        id="r1",
        environment="default",
        task_id="t",
        queue="q",
        status=RunStatus.RUNNING,
        payload={"n": 1},
        attempt=1,
        failure_count=0,
        run_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        event_sequence=2,
        source=RunSource(),
        lease=Lease("w", "token", NOW),
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.status = RunStatus.SUCCEEDED  # type: ignore[misc]
    assert run == dataclasses.replace(run)
    assert hash(run.lease) == hash(Lease("w", "token", NOW))
    assert copy.deepcopy(run) == run
    assert pickle.loads(pickle.dumps(run)) == run
    assert dataclasses.replace(run, attempt=2).attempt == 2
    assert run.replays == 0 and run.result is None  # defaults


def _stores_through_setattr(cls: type) -> bool:
    # A frozen dataclass's own __init__ calls object.__setattr__ for every field; both
    # it and slot_init's are compiled from "<string>" under the same qualified name.
    return "__setattr__" in cls.__init__.__code__.co_names


@pytest.mark.parametrize(
    "cls",
    [
        Run,
        Lease,
        NewRun,
        NewEvent,
        CreateOutcome,
        RunChanges,
        Transition,
        LeaseRequest,
        OutboxMessage,
        TriggerPlan,
        Prepared,
        CreationBatch,
    ],
)
def test_hot_records_use_it(cls: type) -> None:
    assert _stores_through_setattr(Plain)  # the check tells the two apart
    assert not _stores_through_setattr(cls)
    assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"


def test_new_event_factory_default() -> None:
    assert NewEvent(RunEventType.SUCCEEDED).data == {}
    assert NewEvent(RunEventType.SUCCEEDED).data is not NewEvent(RunEventType.SUCCEEDED).data


def test_refuses_what_it_would_not_mirror() -> None:
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class Hidden:
        a: int
        b: int = field(default=0, init=False)

    @dataclass(frozen=True, slots=True, kw_only=True)
    class KeywordOnly:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    for cls in (Mutable, PostInit, Hidden, KeywordOnly, NoSlots):
        with pytest.raises(TypeError):
            slot_init(cls)


def test_instances_are_of_the_class_and_a_subclass_is_filled_too() -> None:
    assert type(Fast(1)) is Fast
    assert Fast(1, "x") == Fast(1, "x")

    class Sub(Fast):
        __slots__ = ("e",)

    # Another layout than the twin's: filled through the slot descriptors instead.
    made = Sub(2, "y")
    assert type(made) is Sub
    assert (made.a, made.b, made.c, made.d) == (2, "y", [], None)


def test_many_builder_builds_what_the_init_builds() -> None:
    build = many_builder(Fast, ("a", "c"))
    assert many_builder(Fast, ("a", "c")) is build  # made once per class and fields
    shared: list[int] = [9]
    made = build([1, 2, 3], [shared, [], [4]], b="x", d=None)
    assert made == [Fast(1, "x", shared, None), Fast(2, "x", [], None), Fast(3, "x", [4], None)]
    assert all(type(record) is Fast for record in made)
    assert made[0].c is shared
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].a = 5  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(made[1])) == made[1]
    assert build([], [], b="x", d=None) == []
    # One varying field; every other one must be given.
    assert many_builder(Fast, ("b",))(["p", "q"], a=0, c=[], d={"k": 1}) == [
        Fast(0, "p", [], {"k": 1}),
        Fast(0, "q", [], {"k": 1}),
    ]
    with pytest.raises(TypeError):
        build([1], [[]], b="x")  # d missing
    with pytest.raises(ValueError):
        build([1, 2], [[]], b="x", d=None)  # columns of different lengths


def test_many_builder_builds_runs_as_run_does() -> None:
    run = Run("r1", "default", "t", "q", RunStatus.QUEUED, {"n": 1}, 0, 0, NOW, NOW, NOW, 1,
              RunSource(), concurrency_key="c", priority=3)  # fmt: skip
    fields = {f.name: getattr(run, f.name) for f in dataclasses.fields(Run)}
    shared = {name: value for name, value in fields.items() if name not in ("id", "payload")}
    (made,) = many_builder(Run, ("id", "payload"))([run.id], [run.payload], **shared)
    assert made == run and type(made) is Run


def test_many_builder_refuses_what_it_cannot_build() -> None:
    with pytest.raises(TypeError):
        many_builder(Plain, ("a",))  # no slot_init
    with pytest.raises(TypeError):
        many_builder(Fast, ("a", "nope"))
    with pytest.raises(TypeError):
        many_builder(Fast, ("a", "a"))
