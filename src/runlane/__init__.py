"""Runlane: durable background tasks whose truth lives in your database."""

from runlane.core.clock import Clock, ManualClock, SystemClock
from runlane.core.context import Context, Release, Signal, SignalReason
from runlane.core.definitions import QueueDef, TaskDef, queue, task
from runlane.core.errors import ErrorCode, RunlaneError
from runlane.core.lane_spec import Lane
from runlane.core.observing import Attempt, Observer, Outcome
from runlane.core.retry import BackoffType, RetryPolicy
from runlane.core.runtime import Runlane
from runlane.core.schedule_defs import ScheduleDef, schedule
from runlane.core.worker import Worker, WorkerMode
from runlane.lanes import postgres_lane, postgres_sqs_lane, sqlite_lane
from runlane.types.runs import (
    Page,
    QueueStats,
    QueueThroughput,
    Run,
    RunEvent,
    RunEventType,
    RunFailure,
    RunSource,
    RunSourceType,
    RunStatus,
    TickReport,
)

__all__ = [
    "Attempt",
    "BackoffType",
    "Clock",
    "Context",
    "ErrorCode",
    "Lane",
    "ManualClock",
    "Observer",
    "Outcome",
    "Page",
    "QueueDef",
    "QueueStats",
    "QueueThroughput",
    "Release",
    "RetryPolicy",
    "Run",
    "RunEvent",
    "RunEventType",
    "RunFailure",
    "RunSource",
    "RunSourceType",
    "RunStatus",
    "Runlane",
    "RunlaneError",
    "ScheduleDef",
    "Signal",
    "SignalReason",
    "SystemClock",
    "TaskDef",
    "TickReport",
    "Worker",
    "WorkerMode",
    "postgres_lane",
    "postgres_sqs_lane",
    "queue",
    "schedule",
    "sqlite_lane",
    "task",
]
#: The package version; the build reads it from here (the only place it is written).
__version__ = "0.1.0"
