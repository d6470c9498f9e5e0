"""What a handler receives: the message and its delivery context (contract 5.5)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from runlane.model.context import Context, Signal

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Message(Generic[P]):
    """A published message as a handler (or an operator) sees it.

    ``id`` is stable across deliveries, redeliveries and replays: key side
    effects on it.
    """

    id: str
    topic: str
    #: The topic schema's instance, or the plain JSON value.
    payload: P
    attributes: Mapping[str, str]
    published_at: datetime
    #: Position in the environment's publish order; ``None`` on SNS topics.
    sequence: int | None


class DeliveryContext(Context):
    """Passed to every subscription handler: a task :class:`Context` plus the delivery's facts.

    ``attempt`` counts every claim of the delivery and keeps counting after a
    replay; the retry budget restarts instead (``max_attempts`` is the budget).
    """

    def __init__(
        self,
        *,
        run_id: str,
        subscription: str,
        queue: str,
        attempt: int,
        signal: Signal,
        trace_carrier: dict[str, str] | None,
        heartbeat: Callable[[], Awaitable[None]],
        worker_id: str,
        topic: str,
        message_id: str,
        key: str | None,
        is_replay: bool,
        max_attempts: int,
    ) -> None:
        super().__init__(
            run_id=run_id,
            task_id=subscription,
            queue=queue,
            attempt=attempt,
            signal=signal,
            scheduled_for=None,
            trace_carrier=trace_carrier,
            heartbeat=heartbeat,
            worker_id=worker_id,
        )
        self.subscription = subscription
        self.topic = topic
        self.message_id = message_id
        self.key = key
        self.is_replay = is_replay
        self.max_attempts = max_attempts

    def __repr__(self) -> str:
        return (
            f"DeliveryContext(run_id={self.run_id!r}, subscription={self.subscription!r}, "
            f"message_id={self.message_id!r}, attempt={self.attempt})"
        )
