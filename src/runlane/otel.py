"""OpenTelemetry tracing for Runlane (``pip install 'runlane[otel]'``: the API only).

``otel_tracing()`` is an observer that opens a PRODUCER span ``trigger {task_id}``
around every trigger and a CONSUMER span ``execute {task_id}`` around every
attempt, wherever it runs (worker, ``execute_next``, ``run_now``, an SQS
consumer or Lambda)::

    from runlane.otel import otel_tracing

    rl = Runlane(lane=..., queues=[...], tasks=[...], observers=[otel_tracing()])

The producer writes its span context into the ``trace_carrier`` of each run it
creates that has none (a carrier the caller passed is stored untouched). Each
attempt's span is a child of, and links to, the run's *stored* carrier, so the
request that triggered a run, the trigger and every attempt (first, retries,
releases, on any host) are one trace. A carrier that cannot be parsed starts a
new root trace. The tracer comes from ``tracer_provider`` or the global
provider, the propagator from ``propagator`` or the global one; no global is
ever set here.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from runlane import Attempt, AttemptOutcome, Observer, Run, __version__
from runlane.core.errors import ErrorCode, RunlaneError

if TYPE_CHECKING:
    from runlane.core.observing import ObservedRuntime

__all__ = ["OtelTracing", "otel_tracing"]

#: The producer span of the trigger in progress (to name the run it created).
_PRODUCER: contextvars.ContextVar[Any] = contextvars.ContextVar("runlane_producer", default=None)

_FAILED = (AttemptOutcome.FAILED, AttemptOutcome.RETRIED)


def _api() -> tuple[Any, Any, Any]:
    try:
        from opentelemetry import context, propagate, trace
    except ImportError as error:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            "OpenTelemetry tracing needs opentelemetry-api: pip install 'runlane[otel]'.",
        ) from error
    return context, propagate, trace


class OtelTracing(Observer):
    """Producer and consumer spans with messaging semantic-convention attributes;
    build it with :func:`otel_tracing`."""

    def __init__(self, tracer_provider: Any = None, propagator: Any = None) -> None:
        self._context, self._propagate, self._trace = _api()
        self._provider = tracer_provider
        self._propagator = propagator
        self._tracer: Any = None
        self._environment = ""
        self._last_creation: tuple[dict[str, str], Any, list[Any]] | None = None

    def attached(self, runtime: ObservedRuntime) -> None:
        self._environment = runtime.environment

    @property
    def tracer(self) -> Any:
        """The tracer, resolved on first use (the global provider may be set later)."""
        if self._tracer is None:
            self._tracer = self._trace.get_tracer(
                "runlane", __version__, tracer_provider=self._provider
            )
        return self._tracer

    @property
    def propagator(self) -> Any:
        """The text-map propagator: the one given, else the global one at call time."""
        return self._propagator or self._propagate.get_global_textmap()

    @contextlib.contextmanager
    def producing(self, task_id: str, queue: str, count: int) -> Iterator[Mapping[str, str] | None]:
        attributes: dict[str, Any] = {
            "messaging.system": "runlane",
            "messaging.destination.name": queue,
            "messaging.operation.name": "trigger",
            "messaging.operation.type": "send",
            "runlane.task_id": task_id,
            "runlane.environment": self._environment,
        }
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        with self.tracer.start_as_current_span(
            f"trigger {task_id}", kind=self._trace.SpanKind.PRODUCER, attributes=attributes
        ) as span:
            carrier: dict[str, str] = {}
            self.propagator.inject(carrier)
            token = _PRODUCER.set(span)
            try:
                yield carrier or None
            finally:
                _PRODUCER.reset(token)

    def triggered(self, runs: Sequence[Run]) -> None:
        span = _PRODUCER.get()
        if span is not None and len(runs) == 1:
            span.set_attribute("messaging.message.id", runs[0].id)

    def attempt(self, attempt: Attempt) -> AbstractAsyncContextManager[None]:
        return _Consumer(self, attempt)

    def _creation(self, carrier: dict[str, str]) -> tuple[Any, list[Any]]:
        """The parent context and links for a stored carrier (the last one is kept:
        runs of one trigger_many, and a run's retries, share theirs)."""
        cached = self._last_creation
        if cached is not None and cached[0] == carrier:
            return cached[1], cached[2]
        trace = self._trace
        extracted = self.propagator.extract(carrier)
        created = trace.get_current_span(extracted).get_span_context()
        if created.is_valid:
            parent, links = extracted, [trace.Link(created)]
        else:
            parent, links = self._context.Context(), []  # unparsable: a new root trace
        self._last_creation = (dict(carrier), parent, links)
        return parent, links

    def start(self, attempt: Attempt) -> Any:
        """The started ``execute`` span of ``attempt``."""
        run = attempt.run
        parent: Any = None
        links: list[Any] = []
        if run.trace_carrier:
            parent, links = self._creation(run.trace_carrier)
        return self.tracer.start_span(
            f"execute {run.task_id}",
            context=parent,
            kind=self._trace.SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": "runlane",
                "messaging.destination.name": run.queue,
                "messaging.operation.name": "execute",
                "messaging.operation.type": "process",
                "messaging.message.id": run.id,
                "runlane.task_id": run.task_id,
                "runlane.environment": self._environment,
                "runlane.attempt": run.attempt,
                "runlane.worker_id": attempt.worker_id,
            },
        )

    def finish(self, span: Any, attempt: Attempt) -> None:
        """Set the outcome (and the error of a failed attempt) and end ``span``."""
        outcome = attempt.outcome
        if outcome is not None:
            span.set_attribute("runlane.outcome", outcome.value)
        if outcome in _FAILED:
            error = attempt.error
            failure = attempt.failure
            if error is not None:
                error_type = type(error).__name__
                span.record_exception(error)
            else:
                error_type = failure.code if failure is not None else "unknown"
            span.set_attribute("error.type", error_type)
            message = failure.message if failure is not None else error_type
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))
        span.end()


class _Consumer:
    """The ``execute`` span, current from the lease until the outcome is written."""

    __slots__ = ("_attempt", "_span", "_token", "_tracing")

    def __init__(self, tracing: OtelTracing, attempt: Attempt) -> None:
        self._tracing = tracing
        self._attempt = attempt

    async def __aenter__(self) -> None:
        tracing = self._tracing
        self._span = tracing.start(self._attempt)
        self._token = tracing._context.attach(tracing._trace.set_span_in_context(self._span))

    async def __aexit__(self, *exc: object) -> None:
        self._tracing._context.detach(self._token)
        self._tracing.finish(self._span, self._attempt)


def otel_tracing(tracer_provider: Any = None, propagator: Any = None) -> OtelTracing:
    """An observer tracing triggers (PRODUCER) and attempts (CONSUMER) through the
    stored ``trace_carrier``; ``tracer_provider`` and ``propagator`` default to the
    global ones, looked up when first needed.

    Raises ``RunlaneError(CONFIGURATION_INVALID)`` without ``opentelemetry-api``.
    """
    return OtelTracing(tracer_provider, propagator)
