"""Runlane: durable background tasks whose truth lives in your database."""

from runlane.core.observing import Attempt, Observer
from runlane.core.observing import Outcome as AttemptOutcome
from runlane.core.queue_pauses import QueueInfo, Queues
from runlane.core.runtime import Runlane
from runlane.core.worker import Worker, WorkerMode
from runlane.core.workflows import Group
from runlane.lanes import postgres_lane, postgres_sqs_lane, sqlite_lane
from runlane.model.context import Context, Release, Signal, SignalReason
from runlane.model.definitions import TaskDef, task
from runlane.model.queue_defs import QueueDef, queue
from runlane.model.schedule_defs import ScheduleDef, schedule
from runlane.ports.lane import Lane
from runlane.topics.definitions import (
    SubscriptionDef,
    SubscriptionMode,
    TopicDef,
    subscription,
    topic,
)
from runlane.topics.messages import DeliveryContext, Message
from runlane.topics.outcomes import (
    DeadLetterReason,
    FatalWorkError,
    Outcome,
    OutcomeKind,
    TransientWorkError,
)
from runlane.topics.records import DeadLetter, PublishReceipt, SubscriptionStats
from runlane.types.clock import Clock, ManualClock, SystemClock
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.rate_limits import RateLimit
from runlane.types.records import GroupStatus, HaltedKey
from runlane.types.retry import BackoffType, RetryPolicy
from runlane.types.runs import (
    Page,
    QueueStats,
    QueueThroughput,
    Run,
    RunEvent,
    RunEventType,
    RunFailure,
    RunProgress,
    RunSource,
    RunSourceType,
    RunStatus,
    ThroughputPoint,
    ThroughputSeries,
    TickReport,
)

__all__ = [
    "Attempt",
    "AttemptOutcome",
    "BackoffType",
    "Clock",
    "Context",
    "DeadLetter",
    "DeadLetterReason",
    "DeliveryContext",
    "ErrorCode",
    "FatalWorkError",
    "Group",
    "GroupStatus",
    "HaltedKey",
    "Lane",
    "ManualClock",
    "Message",
    "Observer",
    "Outcome",
    "OutcomeKind",
    "Page",
    "PublishReceipt",
    "QueueDef",
    "QueueInfo",
    "QueueStats",
    "QueueThroughput",
    "Queues",
    "RateLimit",
    "Release",
    "RetryPolicy",
    "Run",
    "RunEvent",
    "RunEventType",
    "RunFailure",
    "RunProgress",
    "RunSource",
    "RunSourceType",
    "RunStatus",
    "Runlane",
    "RunlaneError",
    "ScheduleDef",
    "Signal",
    "SignalReason",
    "SubscriptionDef",
    "SubscriptionMode",
    "SubscriptionStats",
    "SystemClock",
    "TaskDef",
    "ThroughputPoint",
    "ThroughputSeries",
    "TickReport",
    "TopicDef",
    "TransientWorkError",
    "Worker",
    "WorkerMode",
    "postgres_lane",
    "postgres_sqs_lane",
    "queue",
    "schedule",
    "sqlite_lane",
    "subscription",
    "task",
    "topic",
]
#: The package version; the build reads it from here (the only place it is written).
__version__ = "0.1.0"
