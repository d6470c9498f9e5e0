"""Topics and subscriptions as users define them (contract 5.2).

Every rule is checked where the definition is made, so a bad subscription fails
at import time with ``CONFIGURATION_INVALID`` rather than at the first publish.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from pydantic import BaseModel

from runlane.model.queue_defs import QueueDef
from runlane.topics.attributes import (
    AttributeFilter,
    attribute_name_problem,
    filter_matches,
    normalize_filter,
)
from runlane.topics.constants import (
    DEFAULT_DEDUPLICATION_WINDOW,
    DEFAULT_SUBSCRIPTION_RETRY,
    MAX_DEDUPLICATION_WINDOW,
)
from runlane.types.durations import Duration, parse_duration, parse_optional_duration
from runlane.types.errors import configuration_error
from runlane.types.ids import validate_identifier
from runlane.types.retry import RetryPolicy
from runlane.types.runs import SubscriptionMode as SubscriptionMode

KeyFunction = Callable[[Any], "str | None"]
"""Computes a delivery's key from the :class:`~runlane.topics.messages.Message`."""


_MAX_WINDOW_SECONDS = parse_duration(MAX_DEDUPLICATION_WINDOW)


@dataclass(frozen=True, slots=True, init=False)
class TopicDef:
    """A named stream messages are published to. Build it with :func:`topic`.

    Compared by value: two equal definitions are the same topic.
    """

    name: str
    schema: type[BaseModel] | None
    #: Seconds a deduplication key is remembered.
    deduplication_window: float

    def __init__(
        self,
        name: str,
        *,
        schema: type[BaseModel] | None = None,
        deduplication_window: Duration = DEFAULT_DEDUPLICATION_WINDOW,
    ) -> None:
        validate_identifier(name, name="topic name")
        if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise configuration_error(
                f"topic {name!r}: schema must be a pydantic model class, got {schema!r}."
            )
        window = parse_duration(
            deduplication_window, name=f"topic {name!r}: deduplication_window", allow_zero=False
        )
        if window > _MAX_WINDOW_SECONDS:
            raise configuration_error(
                f"topic {name!r}: deduplication_window may be at most "
                f"{MAX_DEDUPLICATION_WINDOW!r}, got {deduplication_window!r}."
            )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "deduplication_window", window)


def topic(
    name: str,
    *,
    schema: type[BaseModel] | None = None,
    deduplication_window: Duration = DEFAULT_DEDUPLICATION_WINDOW,
) -> TopicDef:
    """Define a topic.

    >>> orders = topic("orders", schema=OrderEvent, deduplication_window="1h")
    """
    return TopicDef(name, schema=schema, deduplication_window=deduplication_window)


@dataclass(frozen=True, slots=True)
class SubscriptionDef:
    """A standing request on one topic. Build it with :func:`subscription`."""

    name: str
    topic: TopicDef
    handler: Callable[..., Any]
    filter: AttributeFilter | None
    mode: SubscriptionMode
    #: An attribute name (its value is the key), a function of the message, or ``None``.
    key: str | KeyFunction | None
    queue: QueueDef | None
    retry: RetryPolicy
    timeout: float | None
    is_async: bool

    def matches(self, attributes: Mapping[str, str]) -> bool:
        """Whether a message with ``attributes`` passes this subscription's filter."""
        return filter_matches(self.filter, attributes)

    def __hash__(self) -> int:
        # The filter is a dict (unhashable); the name identifies a subscription.
        return hash(self.name)

    def __repr__(self) -> str:
        topic, mode = self.topic.name, self.mode.value
        return f"SubscriptionDef({self.name!r}, topic={topic!r}, mode={mode!r})"


@overload
def subscription(
    name: str,
    *,
    topic: TopicDef,
    handler: Callable[..., Any],
    filter: Mapping[str, Sequence[str]] | None = None,
    mode: SubscriptionMode | str = SubscriptionMode.NONE,
    key: str | KeyFunction | None = None,
    queue: QueueDef | None = None,
    retry: RetryPolicy | None = None,
    timeout: Duration | None = None,
) -> SubscriptionDef: ...


@overload
def subscription(
    name: str,
    *,
    topic: TopicDef,
    handler: None = None,
    filter: Mapping[str, Sequence[str]] | None = None,
    mode: SubscriptionMode | str = SubscriptionMode.NONE,
    key: str | KeyFunction | None = None,
    queue: QueueDef | None = None,
    retry: RetryPolicy | None = None,
    timeout: Duration | None = None,
) -> Callable[[Callable[..., Any]], SubscriptionDef]: ...


def subscription(
    name: str,
    *,
    topic: TopicDef,
    handler: Callable[..., Any] | None = None,
    filter: Mapping[str, Sequence[str]] | None = None,
    mode: SubscriptionMode | str = SubscriptionMode.NONE,
    key: str | KeyFunction | None = None,
    queue: QueueDef | None = None,
    retry: RetryPolicy | None = None,
    timeout: Duration | None = None,
) -> SubscriptionDef | Callable[[Callable[..., Any]], SubscriptionDef]:
    """Define a subscription; without ``handler=`` it decorates the handler.

    The handler is a sync or async callable ``(message, ctx)``.

    >>> @subscription("orders.email", topic=orders, filter={"event": ["paid"]},
    ...               mode=SubscriptionMode.EXCLUSIVE, key="customer")
    ... async def email_customer(message: Message, ctx: DeliveryContext) -> None: ...
    """
    validate_identifier(name, name="subscription name")
    where = f"subscription {name!r}"
    if not isinstance(topic, TopicDef):
        raise configuration_error(f"{where}: topic must be a topic(...) definition, got {topic!r}.")
    try:
        mode_value = SubscriptionMode(mode)
    except ValueError:
        raise configuration_error(
            f"{where}: mode must be one of 'none', 'exclusive' or 'ordered', got {mode!r}."
        ) from None
    attribute_filter = normalize_filter(filter, subscription=name)
    _check_key(where, mode_value, key)
    if queue is not None and not isinstance(queue, QueueDef):
        raise configuration_error(f"{where}: queue must be a queue(...) definition.")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise configuration_error(f"{where}: retry must be a RetryPolicy.")
    timeout_s = parse_optional_duration(timeout, name=f"{where}: timeout", allow_zero=False)

    def define(fn: Callable[..., Any]) -> SubscriptionDef:
        if not callable(fn):
            raise configuration_error(
                f"{where}: the handler must be a function (message, ctx), got {fn!r}."
            )
        return SubscriptionDef(
            name=name,
            topic=topic,
            handler=fn,
            filter=attribute_filter,
            mode=mode_value,
            key=key,
            queue=queue,
            retry=retry or DEFAULT_SUBSCRIPTION_RETRY,
            timeout=timeout_s,
            is_async=inspect.iscoroutinefunction(fn),
        )

    return define if handler is None else define(handler)


def _check_key(where: str, mode: SubscriptionMode, key: object) -> None:
    if mode is SubscriptionMode.NONE:
        if key is not None:
            raise configuration_error(
                f"{where}: mode 'none' takes no key (it would do nothing); "
                "drop key=, or use mode 'exclusive' or 'ordered'."
            )
        return
    if key is None:
        raise configuration_error(
            f"{where}: mode {mode.value!r} needs key= (an attribute name, or a function "
            "of the message returning the key)."
        )
    if isinstance(key, str):
        problem = attribute_name_problem(key)
        if problem is not None:
            raise configuration_error(f"{where}: key names a message attribute, but {problem}.")
    elif not callable(key):
        raise configuration_error(
            f"{where}: key must be an attribute name or a function of the message, "
            f"got {type(key).__name__}."
        )
