"""Groups and chains (contract 8.2), built on dependencies: a group's callback is a
run ``after`` every member, a chain's runs each wait for the one before.

``rl.trigger_group`` and ``rl.trigger_chain`` write everything in one transaction
(one invalid payload writes nothing); ``rl.groups.get`` reads a group's progress.
The callback is released by the settle of the last member, in its transaction,
through the same counter every dependent has: no member's settle counts the group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runlane.core.producing import Producer, RunWriter
from runlane.core.store import StoreScope
from runlane.model.definitions import TaskDef
from runlane.model.dependencies import CANCEL, MAX_GROUP_MEMBERS, validate_on_failure
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.ids import new_run_id
from runlane.types.records import GroupStatus, NewGroup, NewRun, NewWaitingRun
from runlane.types.runs import Run, RunSource, RunSourceType

_TRIGGERED = RunSource(RunSourceType.TRIGGER)
Connect = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Group:
    """What ``rl.trigger_group`` wrote: the group's id, its member runs in the order
    of the payloads, and its callback run (``None`` without ``then``)."""

    id: str
    runs: list[Run]
    callback: Run | None


class Workflows:
    """``rl.trigger_group`` and ``rl.trigger_chain``."""

    def __init__(self, producer: Producer, writer: RunWriter) -> None:
        self._producer = producer
        self._writer = writer

    async def trigger_group(
        self,
        task: TaskDef[Any] | str,
        payloads: Sequence[Any],
        *,
        then: tuple[TaskDef[Any] | str, Any] | None = None,
        on_failure: str = CANCEL,
    ) -> Group:
        """Members, group and callback in one transaction (see ``Runlane.trigger_group``)."""
        if isinstance(payloads, (str, bytes)) or not isinstance(payloads, Sequence):
            raise configuration_error("payloads must be a list of payloads.")
        if not payloads:
            raise configuration_error("a group needs at least one member payload.")
        if len(payloads) > MAX_GROUP_MEMBERS:
            raise configuration_error(
                f"a group has at most {MAX_GROUP_MEMBERS} members; got {len(payloads)}."
            )
        policy = validate_on_failure(on_failure)
        producer = self._producer
        plan = producer.plan_trigger(task, source=_TRIGGERED)
        prepared = plan.prepare(payloads)
        members = plan.build(prepared, 0, len(prepared))
        group_id = new_run_id()
        callback: NewWaitingRun | None = None
        if then is not None:
            if not isinstance(then, tuple) or len(then) != 2:
                raise configuration_error("then must be a (task, payload) pair.")
            callback_task, callback_payload = then
            single = producer.build_new_run(
                callback_task, callback_payload, source=_TRIGGERED, after=[members[0].id]
            )
            # Every member, past the limit of after= (a group's own count is bounded above).
            assert isinstance(single, NewWaitingRun)
            callback = dataclasses.replace(
                single, after=tuple(member.id for member in members), on_failure=policy
            )
        storage = self._writer.require_dependencies()
        group = NewGroup(id=group_id, task_id=plan.task.id, callback=callback)
        runs, callback_run = await self._writer.create_group(storage, group, members)
        return Group(id=group_id, runs=runs, callback=callback_run)

    async def trigger_chain(self, steps: Sequence[tuple[TaskDef[Any] | str, Any]]) -> list[Run]:
        """Runs each ``after`` the previous one, in one transaction (see
        ``Runlane.trigger_chain``)."""
        if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or not steps:
            raise configuration_error("a chain is a non-empty list of (task, payload) pairs.")
        producer = self._producer
        runs: list[NewRun] = []
        for step in steps:
            if not isinstance(step, tuple) or len(step) != 2:
                raise configuration_error("each step of a chain is a (task, payload) pair.")
            step_task, payload = step
            # The previous run is written first, in the same transaction.
            after = [runs[-1].id] if runs else None
            runs.append(producer.build_new_run(step_task, payload, source=_TRIGGERED, after=after))
        if len(runs) > 1:
            self._writer.require_dependencies()
        outcomes = await self._writer.create(runs)
        return [outcome.run for outcome in outcomes]


class Groups:
    """``rl.groups``: reading groups."""

    def __init__(self, store: StoreScope, writer: RunWriter, connect: Connect) -> None:
        self._store = store
        self._writer = writer
        self._connect = connect

    async def get(self, group_id: str) -> GroupStatus:
        """A group's progress: members per status (``counts``), ``done`` and ``total``,
        and its callback's id; ``RUN_NOT_FOUND`` for an id that is no group of this
        environment."""
        if not isinstance(group_id, str) or not group_id:
            raise configuration_error("group_id must be a non-empty string.")
        await self._connect()
        storage = self._writer.require_dependencies()
        group = await storage.get_group(self._store.environment, group_id)
        if group is None:
            raise RunlaneError(
                ErrorCode.RUN_NOT_FOUND,
                f"no group {group_id!r} in environment {self._store.environment!r}.",
                meta={"group_id": group_id},
            )
        return group
