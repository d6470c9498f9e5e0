"""The registry: the one authoritative list of queues and tasks of a runtime."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runlane.model.definitions import TaskDef
from runlane.model.queue_defs import QueueDef
from runlane.model.schedule_defs import ScheduleDef
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.records import QueuePolicy

#: An unknown task id's error names at most this many registered ids that look alike.
MAX_SUGGESTIONS = 3


class Registry:
    """Queues and tasks by name; rejects unknown names and policy drift."""

    def __init__(
        self,
        queues: Sequence[QueueDef],
        tasks: Sequence[TaskDef[Any]] | Mapping[str, TaskDef[Any]],
    ) -> None:
        if isinstance(queues, QueueDef) or not isinstance(queues, Iterable):
            raise configuration_error("queues must be a list of queue(...) definitions.")
        self.queues: dict[str, QueueDef] = {}
        for definition in queues:
            if not isinstance(definition, QueueDef):
                raise configuration_error(
                    f"queues must hold queue(...) definitions, got {type(definition).__name__}."
                )
            if definition.name in self.queues:
                raise configuration_error(f"queue name {definition.name!r} is registered twice.")
            self.queues[definition.name] = definition
        defaults = [q.name for q in self.queues.values() if q.default]
        if len(defaults) > 1:
            raise configuration_error(f"at most one default queue is allowed, got {defaults}.")
        self.default_queue = self.queues[defaults[0]] if defaults else None

        if isinstance(tasks, TaskDef) or not isinstance(tasks, Iterable):
            raise configuration_error("tasks must be a list (or mapping) of @task definitions.")
        task_list = list(tasks.values()) if isinstance(tasks, Mapping) else list(tasks)
        self.tasks: dict[str, TaskDef[Any]] = {}
        self.schedules: dict[str, tuple[ScheduleDef, TaskDef[Any]]] = {}
        for task_def in task_list:
            if not isinstance(task_def, TaskDef):
                raise configuration_error(
                    f"tasks must hold @task(...) definitions, got {type(task_def).__name__}."
                )
            if task_def.id in self.tasks:
                raise configuration_error(f"task id {task_def.id!r} is registered twice.")
            if task_def.queue is not None:
                self.resolve_queue(task_def.queue, purpose=f"task {task_def.id!r}")
            self.tasks[task_def.id] = task_def
            for entry in task_def.schedules:
                if entry.id in self.schedules:
                    raise configuration_error(f"schedule id {entry.id!r} is used twice.")
                if entry.queue is not None:
                    self.resolve_queue(entry.queue, purpose=f"schedule {entry.id!r}")
                self.schedules[entry.id] = (entry, task_def)
        self.queue_policies = [
            QueuePolicy(
                q.name,
                q.concurrency_limit,
                rate_limit=q.rate_limit,
                rate_keyed=q.rate_limit_by is not None,
                priority_window=q.priority_window,
            )
            for q in self.queues.values()
        ]

    def resolve_queue(self, definition: QueueDef | str, *, purpose: str = "call") -> QueueDef:
        """The registered queue for a definition (or name); unknown → QUEUE_NOT_FOUND."""
        name = definition.name if isinstance(definition, QueueDef) else definition
        registered = self.queues.get(name) if isinstance(name, str) else None
        if registered is None:
            raise RunlaneError(
                ErrorCode.QUEUE_NOT_FOUND,
                f"{purpose}: queue {name!r} is not registered with this runtime "
                f"(registered: {sorted(self.queues)}).",
                meta={"queue": name},
            )
        if (
            isinstance(definition, QueueDef)
            and definition is not registered
            and definition != registered
        ):
            raise RunlaneError(
                ErrorCode.QUEUE_POLICY_DRIFT,
                f"{purpose}: queue {name!r} has a different policy than the registered one "
                "(concurrency_limit, dispatch_timeout, rate_limit, priority_window or default "
                "differ); share one definition.",
                meta={"queue": name},
            )
        return registered

    def resolve_task(self, definition: TaskDef[Any] | str) -> TaskDef[Any]:
        """The registered task for a definition (or id); unknown → TASK_NOT_FOUND."""
        task_id = definition.id if isinstance(definition, TaskDef) else definition
        registered = self.tasks.get(task_id) if isinstance(task_id, str) else None
        if registered is None:
            suggestions = (
                difflib.get_close_matches(task_id, self.tasks, n=MAX_SUGGESTIONS)
                if isinstance(task_id, str)
                else []
            )
            hint = f" Did you mean {' or '.join(map(repr, suggestions))}?" if suggestions else ""
            raise RunlaneError(
                ErrorCode.TASK_NOT_FOUND,
                f"task {task_id!r} is not registered with this runtime.{hint}",
                meta={"task_id": task_id, "suggestions": suggestions},
            )
        if isinstance(definition, TaskDef) and definition is not registered:
            raise configuration_error(
                f"task {task_id!r} is a different definition than the registered one; "
                "register and trigger the same task object."
            )
        return registered

    def queue_for(self, task: TaskDef[Any], override: QueueDef | str | None) -> QueueDef:
        """Queue selection: explicit override, else the task's, else the default."""
        if override is not None:
            return self.resolve_queue(override, purpose=f"trigger of {task.id!r}")
        if task.queue is not None:
            return self.resolve_queue(task.queue, purpose=f"task {task.id!r}")
        if self.default_queue is None:
            raise configuration_error(
                f"task {task.id!r} has no queue and the runtime has no default queue; "
                "pass queue=... or mark one queue default=True."
            )
        return self.default_queue

    def policies_for(self, queues: Sequence[QueueDef | str] | None) -> list[QueuePolicy]:
        """Storage policies for a worker filter (``None`` = every registered queue)."""
        if queues is None:
            return list(self.queue_policies)
        if isinstance(queues, QueueDef | str):
            raise configuration_error("queues must be a list of queue definitions.")
        names = {self.resolve_queue(q, purpose="worker filter").name for q in queues}
        return [p for p in self.queue_policies if p.name in names]
