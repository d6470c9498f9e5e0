"""What the topic APIs hand back: publish receipts, dead letters and subscription stats
(contract 5.4.2, 5.8, 5.9). Plain frozen values."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from datetime import datetime
from typing import Any

from runlane.topics.messages import Message
from runlane.types.runs import Run, RunFailure, RunStatus, SubscriptionMode


@dataclass(frozen=True, slots=True)
class PublishReceipt:
    """What ``rl.publish`` did: the message and its delivery runs.

    ``duplicate``: nothing was written; every other field is the original
    message's, and ``runs`` are its deliveries as they are now.
    """

    message_id: str
    topic: str
    duplicate: bool
    #: The delivery runs, in subscription registration order (may be empty).
    runs: list[Run]
    published_at: datetime
    #: The message's place in the environment's publish order; ``None`` on SNS topics.
    sequence: int | None
    provider_message_id: str | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A delivery parked for an operator: replay it or discard it."""

    #: The delivery run's id (what ``replay`` and ``discard`` take).
    id: str
    subscription: str
    topic: str
    key: str | None
    reason: str
    failure: RunFailure | None
    #: The run's attempt that dead-lettered it.
    attempt: int
    replays: int
    dead_lettered_at: datetime
    #: An ORDERED key's head: later messages of its key wait for it.
    blocks_key: bool
    #: The message, its payload as stored JSON (not a schema instance).
    message: Message[Any]


#: Statuses a delivery waits to start in.
WAITING_STATUSES = (
    RunStatus.QUEUED,
    RunStatus.SCHEDULED,
    RunStatus.RETRYING,
    RunStatus.RELEASED,
)
#: Statuses a delivery holds a lease in.
RUNNING_STATUSES = (RunStatus.RUNNING, RunStatus.CANCELLATION_REQUESTED)


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    """A subscription's deliveries by status, and its halted keys.

    ``waiting``, ``running`` and ``dead_lettered`` add up ``counts``; an SNS
    subscription has no counts per status and passes its queues' approximate
    numbers as ``totals`` instead (with ``approximate=True``).
    """

    name: str
    topic: str
    mode: SubscriptionMode
    #: The queue its deliveries go on (``None`` for SNS subscriptions).
    queue: str | None
    #: Deliveries per status; statuses with none are absent (always empty on SNS).
    counts: dict[RunStatus, int] = field(default_factory=dict)
    #: ORDERED: keys whose head is dead-lettered; else 0.
    halted_keys: int = 0
    #: Read from approximate queue attributes (SNS) rather than counted exactly.
    approximate: bool = False
    #: ``(waiting, running, dead_lettered)`` when they are not counted from ``counts``.
    totals: InitVar[tuple[int, int, int] | None] = None
    #: Deliveries waiting to start (queued, scheduled, retrying, released).
    waiting: int = field(init=False)
    #: Deliveries holding a lease.
    running: int = field(init=False)
    #: Deliveries parked for an operator.
    dead_lettered: int = field(init=False)

    def __post_init__(self, totals: tuple[int, int, int] | None) -> None:
        if totals is None:
            counts = self.counts
            totals = (
                sum(counts.get(status, 0) for status in WAITING_STATUSES),
                sum(counts.get(status, 0) for status in RUNNING_STATUSES),
                counts.get(RunStatus.DEAD_LETTERED, 0),
            )
        waiting, running, dead_lettered = totals
        # Frozen: the derived fields are set once, here.
        object.__setattr__(self, "waiting", waiting)
        object.__setattr__(self, "running", running)
        object.__setattr__(self, "dead_lettered", dead_lettered)
