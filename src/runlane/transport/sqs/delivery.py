"""Delivering one SQS wakeup: parse its body, call ``execute_delivery``, report failures.

Shared by the Lambda handler and the long-running consumer. A delivery is
*resolved* when ``execute_delivery`` returns (whatever the run's outcome: a
persisted task failure is still a handled wakeup); it *fails* when the body is
not a wakeup or ``execute_delivery`` raises, and the message is then left for
SQS to redeliver or redrive.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from runlane.model.context import Signal
from runlane.ports.transport import DeliveryMessage
from runlane.ports.wakeup_envelope import parse_wakeup_body
from runlane.types.durations import parse_duration
from runlane.types.errors import configuration_error

logger = logging.getLogger("runlane.sqs")

ExecuteDelivery = Callable[..., Awaitable[Any]]
"""``async def execute_delivery(message: DeliveryMessage, **delivery_options) -> Any``."""

#: Options ``Runlane.execute_delivery`` accepts, and which of them are durations.
DELIVERY_OPTION_NAMES = frozenset(
    {"lease_duration", "heartbeat_interval", "max_attempt_duration", "signal", "worker_id"}
)
_DURATION_OPTIONS = ("lease_duration", "heartbeat_interval", "max_attempt_duration")


class SqsDeliveryFailurePhase(StrEnum):
    """Where handling an SQS message failed."""

    #: The SQS record/message itself is unusable (no body, no id, no receipt handle).
    MESSAGE = "message"
    #: The body is not a runlane v1 wakeup envelope.
    PARSE = "parse"
    #: ``execute_delivery`` raised.
    EXECUTE = "execute"
    #: SQS did not delete a resolved message (it will become visible again).
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class SqsDeliveryFailure:
    """What ``on_delivery_failure`` receives."""

    phase: SqsDeliveryFailurePhase
    cause: BaseException
    provider_message_id: str | None = None
    delivery_message: DeliveryMessage | None = None
    queue_url: str | None = None


OnDeliveryFailure = Callable[[SqsDeliveryFailure], Awaitable[None] | None]
"""A sync or async observer; if it raises, the handler or consumer fails with that error."""


def validate_delivery_options(options: Mapping[str, Any] | None, *, owner: str) -> dict[str, Any]:
    """Check ``delivery_options`` eagerly; return a private copy passed as keyword arguments."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise configuration_error(f"{owner}: delivery_options must be a mapping of options.")
    unknown = sorted(str(key) for key in options if key not in DELIVERY_OPTION_NAMES)
    if unknown:
        raise configuration_error(
            f"{owner}: unsupported delivery_options {unknown}; "
            f"supported: {sorted(DELIVERY_OPTION_NAMES)}."
        )
    for option in _DURATION_OPTIONS:
        if options.get(option) is not None:
            parse_duration(options[option], name=f"delivery_options[{option!r}]", allow_zero=False)
    signal = options.get("signal")
    if signal is not None and not isinstance(signal, Signal):
        raise configuration_error(f"{owner}: delivery_options['signal'] must be a runlane Signal.")
    worker_id = options.get("worker_id")
    if worker_id is not None and (not isinstance(worker_id, str) or not worker_id.strip()):
        raise configuration_error(f"{owner}: delivery_options['worker_id'] must be a string.")
    return dict(options)


def validate_callbacks(
    execute_delivery: object, on_delivery_failure: object, *, owner: str
) -> None:
    """``execute_delivery`` must be callable; ``on_delivery_failure`` callable or ``None``."""
    if not callable(execute_delivery):
        raise configuration_error(
            f"{owner}: execute_delivery must be an async callable such as rl.execute_delivery."
        )
    if on_delivery_failure is not None and not callable(on_delivery_failure):
        raise configuration_error(f"{owner}: on_delivery_failure must be callable or None.")


@dataclass(frozen=True, slots=True)
class WakeupDelivery:
    """Parse → execute → report, for one provider message."""

    execute_delivery: ExecuteDelivery
    delivery_options: Mapping[str, Any]
    on_delivery_failure: OnDeliveryFailure | None

    async def deliver(
        self, body: object, *, provider_message_id: str | None, queue_url: str | None
    ) -> DeliveryMessage | None:
        """The parsed wakeup when it resolved; ``None`` when the message must not be acknowledged.

        Observer errors propagate: they are application failures.
        """
        if not isinstance(body, str):
            await self.report(
                SqsDeliveryFailure(
                    SqsDeliveryFailurePhase.MESSAGE,
                    TypeError("the SQS message has no string body"),
                    provider_message_id=provider_message_id,
                    queue_url=queue_url,
                )
            )
            return None
        try:
            message = parse_wakeup_body(body)
        except Exception as error:
            await self.report(
                SqsDeliveryFailure(
                    SqsDeliveryFailurePhase.PARSE,
                    error,
                    provider_message_id=provider_message_id,
                    queue_url=queue_url,
                )
            )
            return None
        try:
            await self.execute_delivery(message, **self.delivery_options)
        except Exception as error:
            await self.report(
                SqsDeliveryFailure(
                    SqsDeliveryFailurePhase.EXECUTE,
                    error,
                    provider_message_id=provider_message_id,
                    delivery_message=message,
                    queue_url=queue_url,
                )
            )
            return None
        return message

    async def report(self, failure: SqsDeliveryFailure) -> None:
        """Log the failure and hand it to ``on_delivery_failure`` (sync or async)."""
        logger.warning(
            "SQS wakeup %s failed in phase %s: %s",
            failure.provider_message_id,
            failure.phase.value,
            type(failure.cause).__name__,
        )
        if self.on_delivery_failure is None:
            return
        result = self.on_delivery_failure(failure)
        if inspect.isawaitable(result):
            await result
