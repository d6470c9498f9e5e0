"""The transport conformance suite: every wakeup transport must pass all of it.

Use it from a test module of your own::

    from runlane.testing.conformance.transport import *  # noqa: F403

and provide two fixtures:

- ``transport_factory``: ``(queues: Sequence[QueueDef]) -> Transport``, a new
  transport bound to exactly those queues (each call may use fresh provider
  resources);
- ``delivered_wakeups``: ``async (queue: QueueDef) -> list[Delivered]``, every
  message the most recent transport delivered for ``queue`` that nobody has
  read yet, in delivery order (reading acknowledges them), each with the
  provider message id a consumer would see (``None`` if the provider has none).

The tests are async and expect pytest-asyncio in ``auto`` mode.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from runlane.model.queue_defs import QueueDef, queue
from runlane.ports.transport import (
    DeliveryMessage,
    Transport,
    TransportCapabilities,
    WakeupAttempt,
    WakeupFailed,
    WakeupPublished,
)
from runlane.ports.wakeup_envelope import parse_wakeup_body
from runlane.types.errors import ErrorCode, RunlaneError


@dataclass(frozen=True, slots=True)
class Delivered:
    """One message as a consumer of the transport receives it."""

    provider_message_id: str | None
    body: str


TransportFactory = Callable[[Sequence[QueueDef]], Transport]
DeliveredWakeups = Callable[[QueueDef], Awaitable[list[Delivered]]]

MAIN = queue("main", default=True)
OTHER = queue("other")
ENVIRONMENT = "conformance"
#: More wakeups than one provider batch request may carry (SQS: 10).
OVERSIZED_BATCH = 23

_sequence = itertools.count(1)


def _attempt(
    on: QueueDef,
    *,
    run_id: str | None = None,
    requested_at: datetime | None = None,
    trace_carrier: dict[str, str] | None = None,
) -> WakeupAttempt:
    n = next(_sequence)
    return WakeupAttempt(
        message=DeliveryMessage(
            environment=ENVIRONMENT,
            run_id=run_id or f"run-{n}",
            queue=on.name,
            requested_at=requested_at,
            trace_carrier=trace_carrier,
        ),
        outbox_id=f"outbox-{n}",
    )


def _run_ids(delivered: Sequence[Delivered]) -> list[str]:
    return [parse_wakeup_body(message.body).run_id for message in delivered]


async def test_transport_implements_the_protocol_and_exposes_its_bound_queues(
    transport_factory: TransportFactory,
) -> None:
    transport = transport_factory([MAIN, OTHER])
    assert isinstance(transport, Transport)
    assert isinstance(transport.name, str) and transport.name
    assert sorted(q.name for q in transport.queues) == ["main", "other"]
    assert all(isinstance(q, QueueDef) for q in transport.queues)
    assert {q.name: q for q in transport.queues} == {"main": MAIN, "other": OTHER}


async def test_publishing_nothing_returns_no_outcomes(transport_factory: TransportFactory) -> None:
    transport = transport_factory([MAIN])
    await transport.open()
    assert await transport.publish_wakeups([]) == []
    await transport.close()


async def test_outcomes_are_index_aligned_with_attempts_across_queues(
    transport_factory: TransportFactory, delivered_wakeups: DeliveredWakeups
) -> None:
    transport = transport_factory([MAIN, OTHER])
    attempts = [_attempt(MAIN), _attempt(OTHER), _attempt(MAIN), _attempt(OTHER), _attempt(MAIN)]
    outcomes = await transport.publish_wakeups(attempts)
    assert len(outcomes) == len(attempts)
    for outcome in outcomes:
        assert isinstance(outcome, WakeupPublished)
        assert isinstance(outcome.published_at, datetime)
    delivered = [*await delivered_wakeups(MAIN), *await delivered_wakeups(OTHER)]
    assert sorted(_run_ids(delivered)) == sorted(a.message.run_id for a in attempts)
    run_by_provider_id = {
        m.provider_message_id: parse_wakeup_body(m.body).run_id
        for m in delivered
        if m.provider_message_id is not None
    }
    for attempt, outcome in zip(attempts, outcomes, strict=True):
        assert isinstance(outcome, WakeupPublished)
        if outcome.provider_message_id in run_by_provider_id:
            assert run_by_provider_id[outcome.provider_message_id] == attempt.message.run_id


async def test_each_attempt_becomes_exactly_one_message_for_one_run(
    transport_factory: TransportFactory, delivered_wakeups: DeliveredWakeups
) -> None:
    transport = transport_factory([MAIN])
    attempts = [_attempt(MAIN) for _ in range(3)]
    await transport.publish_wakeups(attempts)
    delivered = await delivered_wakeups(MAIN)
    assert sorted(_run_ids(delivered)) == sorted(a.message.run_id for a in attempts)
    assert await delivered_wakeups(MAIN) == []


async def test_the_wakeup_envelope_round_trips_every_field(
    transport_factory: TransportFactory, delivered_wakeups: DeliveredWakeups
) -> None:
    transport = transport_factory([MAIN])
    requested_at = datetime(2026, 3, 1, 12, 30, 15, 250_000, tzinfo=UTC)
    full = _attempt(MAIN, requested_at=requested_at, trace_carrier={"traceparent": "00-abc-def-01"})
    bare = _attempt(MAIN)
    await transport.publish_wakeups([full, bare])
    delivered = await delivered_wakeups(MAIN)
    parsed = {m.run_id: m for m in (parse_wakeup_body(d.body) for d in delivered)}
    assert parsed == {full.message.run_id: full.message, bare.message.run_id: bare.message}


async def test_a_wakeup_for_an_unbound_queue_is_a_configuration_error_and_sends_nothing(
    transport_factory: TransportFactory, delivered_wakeups: DeliveredWakeups
) -> None:
    transport = transport_factory([MAIN])
    with pytest.raises(RunlaneError) as raised:
        await transport.publish_wakeups([_attempt(MAIN), _attempt(queue("elsewhere"))])
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert await delivered_wakeups(MAIN) == []


async def test_more_attempts_than_one_provider_batch_are_all_published(
    transport_factory: TransportFactory, delivered_wakeups: DeliveredWakeups
) -> None:
    transport = transport_factory([MAIN])
    attempts = [_attempt(MAIN) for _ in range(OVERSIZED_BATCH)]
    outcomes = await transport.publish_wakeups(attempts)
    assert len(outcomes) == OVERSIZED_BATCH
    assert all(isinstance(outcome, WakeupPublished) for outcome in outcomes)
    assert sorted(_run_ids(await delivered_wakeups(MAIN))) == sorted(
        a.message.run_id for a in attempts
    )


async def test_one_wakeup_the_provider_cannot_carry_fails_alone(
    transport_factory: TransportFactory, delivered_wakeups: DeliveredWakeups
) -> None:
    # Bigger than any provider's message (SQS: 1 MiB per batch request): the runtime caps
    # carriers far below this, so only a bug or an old row could produce it.
    poison = _attempt(MAIN, trace_carrier={"baggage": "x" * (1_100_000)})
    good = [_attempt(MAIN) for _ in range(OVERSIZED_BATCH)]
    attempts = [*good[:3], poison, *good[3:]]
    outcomes = await transport_factory([MAIN]).publish_wakeups(attempts)
    assert len(outcomes) == len(attempts)
    for attempt, outcome in zip(attempts, outcomes, strict=True):
        if attempt is not poison:
            assert isinstance(outcome, WakeupPublished), attempt.message.run_id
        elif isinstance(outcome, WakeupFailed):
            assert outcome.error.retryable is False
    delivered = set(_run_ids(await delivered_wakeups(MAIN)))
    assert {a.message.run_id for a in good} <= delivered


async def test_republishing_a_wakeup_is_accepted_at_least_once(
    transport_factory: TransportFactory, delivered_wakeups: DeliveredWakeups
) -> None:
    transport = transport_factory([MAIN])
    attempt = _attempt(MAIN)
    first = await transport.publish_wakeups([attempt, attempt])
    second = await transport.publish_wakeups([attempt])
    assert all(isinstance(outcome, WakeupPublished) for outcome in [*first, *second])
    run_ids = _run_ids(await delivered_wakeups(MAIN))
    assert run_ids and set(run_ids) == {attempt.message.run_id}


async def test_capabilities_are_honest(
    transport_factory: TransportFactory, delivered_wakeups: DeliveredWakeups
) -> None:
    transport = transport_factory([MAIN])
    capabilities = transport.capabilities
    assert isinstance(capabilities, TransportCapabilities)
    if capabilities.ordered_delivery:
        assert capabilities.message_grouping, "ordered delivery is ordered per message group"
        start = datetime(2026, 1, 1, tzinfo=UTC)
        attempts = [
            _attempt(MAIN, run_id="ordered-run", requested_at=start + timedelta(seconds=i))
            for i in range(OVERSIZED_BATCH)
        ]
        await transport.publish_wakeups(attempts)
        delivered = [parse_wakeup_body(d.body).requested_at for d in await delivered_wakeups(MAIN)]
        assert delivered == [a.message.requested_at for a in attempts]


__all__ = [name for name in dir() if name.startswith("test_")]
