"""Definitions users write once and pass around: tasks (queues: ``queue_defs``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, overload

from pydantic import BaseModel

from runlane.model.queue_defs import QueueDef
from runlane.model.schedule_defs import ScheduleDef
from runlane.types.durations import Duration, parse_duration, parse_optional_duration
from runlane.types.errors import configuration_error
from runlane.types.ids import validate_identifier
from runlane.types.retry import DEFAULT_RETRY_POLICY, RetryPolicy

DEFAULT_IDEMPOTENCY_KEY_TTL = "30d"

KeyOption = str | Callable[[Any], str] | None
"""A key given as a fixed string or computed from the validated payload."""


P = TypeVar("P")


@dataclass(frozen=True, eq=False)
class TaskDef(Generic[P]):
    """A task: user code plus its payload schema and policy. Build it with :func:`task`."""

    id: str
    fn: Callable[..., Any]
    queue: QueueDef | None
    schema: type[BaseModel] | None
    retry: RetryPolicy
    timeout: float | None
    idempotency_key: KeyOption
    singleton_key: KeyOption
    #: Seconds of retained ownership, or ``None`` for "only while the run is active".
    idempotency_key_ttl: float | None
    is_async: bool
    schedules: tuple[ScheduleDef, ...] = field(default=())

    def __call__(self, payload: Any, ctx: Any) -> Any:
        """Call the task function directly (handy in unit tests)."""
        return self.fn(payload, ctx)

    def __repr__(self) -> str:
        return f"TaskDef({self.id!r})"


M = TypeVar("M", bound=BaseModel)


@overload
def task(
    id: str,
    *,
    queue: QueueDef | None = None,
    schema: type[M],
    retry: RetryPolicy | None = None,
    timeout: Duration | None = None,
    schedules: Sequence[ScheduleDef] = (),
    idempotency_key: KeyOption = None,
    singleton_key: KeyOption = None,
    idempotency_key_ttl: Duration | Literal["active"] = DEFAULT_IDEMPOTENCY_KEY_TTL,
) -> Callable[[Callable[..., Any]], TaskDef[M]]: ...


@overload
def task(
    id: str,
    *,
    queue: QueueDef | None = None,
    schema: None = None,
    retry: RetryPolicy | None = None,
    timeout: Duration | None = None,
    schedules: Sequence[ScheduleDef] = (),
    idempotency_key: KeyOption = None,
    singleton_key: KeyOption = None,
    idempotency_key_ttl: Duration | Literal["active"] = DEFAULT_IDEMPOTENCY_KEY_TTL,
) -> Callable[[Callable[..., Any]], TaskDef[Any]]: ...


def task(
    id: str,
    *,
    queue: QueueDef | None = None,
    schema: type[BaseModel] | None = None,
    retry: RetryPolicy | None = None,
    timeout: Duration | None = None,
    schedules: Sequence[ScheduleDef] = (),
    idempotency_key: KeyOption = None,
    singleton_key: KeyOption = None,
    idempotency_key_ttl: Duration | Literal["active"] = DEFAULT_IDEMPOTENCY_KEY_TTL,
) -> Callable[[Callable[..., Any]], TaskDef[Any]]:
    """Decorate a sync or async function ``(payload, ctx)`` as a task.

    With ``schema=Welcome`` it is a ``TaskDef[Welcome]``: type checkers then accept
    a ``Welcome`` or a mapping as its payload in ``rl.trigger`` and reject others.

    >>> @task("emails.welcome", schema=Welcome, retry=RetryPolicy(max_attempts=5))
    ... async def send_welcome(payload: Welcome, ctx: Context) -> None: ...
    """
    validate_identifier(id, name="task id")
    if queue is not None and not isinstance(queue, QueueDef):
        raise configuration_error(f"task {id!r}: queue must be a queue(...) definition.")
    if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise configuration_error(f"task {id!r}: schema must be a pydantic model class.")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise configuration_error(f"task {id!r}: retry must be a RetryPolicy.")
    timeout_s = parse_optional_duration(timeout, name="timeout", allow_zero=False)
    for option, value in (("idempotency_key", idempotency_key), ("singleton_key", singleton_key)):
        if isinstance(value, str):
            validate_identifier(value, name=option)
        elif value is not None and not callable(value):
            raise configuration_error(
                f"task {id!r}: {option} must be a string or a function of the payload."
            )
    ttl = (
        None
        if idempotency_key_ttl == "active"
        else parse_duration(idempotency_key_ttl, name="idempotency_key_ttl", allow_zero=False)
    )
    schedule_defs = tuple(schedules)
    for entry in schedule_defs:
        if not isinstance(entry, ScheduleDef):
            raise configuration_error(f"task {id!r}: schedules must be schedule(...) definitions.")

    def decorate(fn: Callable[..., Any]) -> TaskDef[Any]:
        if not callable(fn):
            raise configuration_error(f"task {id!r} must decorate a function.")
        definition: TaskDef[Any] = TaskDef(
            id=id,
            fn=fn,
            queue=queue,
            schema=schema,
            retry=retry or DEFAULT_RETRY_POLICY,
            timeout=timeout_s,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            idempotency_key_ttl=ttl,
            is_async=inspect.iscoroutinefunction(fn),
            schedules=schedule_defs,
        )
        for entry in schedule_defs:
            entry.validate_for(definition)
        return definition

    return decorate
