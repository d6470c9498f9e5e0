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

Sampling is the tracer provider's. The trigger's decision travels in the
carrier (sampled or not, the carrier is always written), and a parent-based
sampler applies it to every attempt of the run. An attempt of a run that was
not sampled starts no span when the sampler is sure to drop it (an SDK
``ParentBased`` sampler, as by default) or ``skip_unsampled=True`` says so: the
carrier's context is made current around the handler alone, and the attempt
settles as it would without observers. The observability guide recommends
``ParentBased(TraceIdRatioBased(ratio))`` for busy workers, with the measured
cost of each choice.
"""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from runlane import Attempt, AttemptOutcome, Observer, Run, __version__
from runlane.types.errors import ErrorCode, RunlaneError

if TYPE_CHECKING:
    from runlane.core.observing import ObservedRuntime

__all__ = ["OtelTracing", "otel_tracing"]

#: The producer span of the trigger in progress (to name the run it created).
_PRODUCER: contextvars.ContextVar[Any] = contextvars.ContextVar("runlane_producer", default=None)

_FAILED = (AttemptOutcome.FAILED, AttemptOutcome.RETRIED, AttemptOutcome.DEAD_LETTERED)

#: A version-00 W3C traceparent with nothing around it (the form the W3C propagator
#: writes); anything else goes through the propagator.
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
#: The same, valid (ids not all zeros) and not sampled (the flags' lowest bit clear).
_UNSAMPLED_TRACEPARENT = re.compile(
    r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f][02468ace]"
).fullmatch
_NO_TRACE = "0" * 32
_NO_SPAN = "0" * 16
#: What a trigger gets from a tracer that records nothing, outside any trace.
_NOTHING_PRODUCED: AbstractContextManager[Mapping[str, str] | None] = nullcontext(None)


def _carrier_span_type(api: Any) -> Any:
    """A ``NonRecordingSpan`` made from a checked version-00 W3C ``traceparent``, whose
    span context (the one the W3C propagator extracts: remote, no trace state) is
    parsed when first asked for: an attempt that is not sampled rarely asks."""

    class CarrierSpan(api.NonRecordingSpan):  # type: ignore[misc]
        __slots__ = ("_header", "_parsed")

        def __init__(self, header: str) -> None:  # no super(): _context is lazy
            self._header = header
            self._parsed: Any = None

        @property
        def _context(self) -> Any:
            parsed = self._parsed
            if parsed is None:
                header = self._header
                parsed = self._parsed = api.SpanContext(
                    int(header[3:35], 16),
                    int(header[36:52], 16),
                    True,
                    api.TraceFlags(int(header[53:], 16)),
                )
            return parsed

    return CarrierSpan


def _is_w3c(propagator: Any) -> bool:
    """Whether ``propagator`` is the W3C trace-context propagator, alone or composed
    only with the W3C baggage one (the API's default): for a carrier holding nothing
    but a ``traceparent``, its context can then be read without it."""
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.propagators.composite import CompositePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parts = (
        getattr(propagator, "_propagators", None)
        if type(propagator) is CompositePropagator
        else [propagator]
    )
    if not parts:
        return False
    kinds = {type(part) for part in parts}
    return TraceContextTextMapPropagator in kinds and kinds <= {
        TraceContextTextMapPropagator,
        W3CBaggagePropagator,
    }


def _drops_unsampled_remote_parents(provider: Any) -> bool:
    """Whether ``provider`` is the SDK's with a ``ParentBased`` sampler whose decision
    for an unsampled remote parent is a fixed "drop" (its default, and what
    ``OTEL_TRACES_SAMPLER=parentbased_*`` builds): an attempt whose stored carrier
    was not sampled is then never recorded, whatever its name, attributes or ids, so
    skipping its span changes nothing a span processor or exporter sees."""
    try:
        from opentelemetry.sdk.trace.sampling import Decision, ParentBased, StaticSampler
    except ImportError:  # the API alone: no SDK, nothing to decide here
        return False
    sampler = getattr(provider, "sampler", None)
    if type(sampler) is not ParentBased:
        return False
    unsampled = getattr(sampler, "_remote_parent_not_sampled", None)
    if type(unsampled) is not StaticSampler:
        return False
    return bool(unsampled.should_sample(None, 1, "").decision is Decision.DROP)


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

    def __init__(
        self,
        tracer_provider: Any = None,
        propagator: Any = None,
        *,
        skip_unsampled: bool | None = None,
    ) -> None:
        self._context, self._propagate, self._trace = _api()
        self._provider = tracer_provider
        self._propagator = propagator
        self._skip_unsampled = skip_unsampled
        self._sampled_by: Any = self  # the provider _skips was last found for (none yet)
        self._skips_for_it = False
        self._global_provider: Any = None
        self._tracer: Any = None
        self._environment = ""
        self._last_creation: tuple[dict[str, str], Any, Any, bool] | None = None
        self._root = self._context.Context()
        self._attach, self._detach = self._context.attach, self._context.detach
        self._checked: Any = None  # the propagator _standard was found for
        self._standard = False
        self._carrier_span = _carrier_span_type(self._trace)
        #: The key under which a context holds its span, read once through the API
        #: (a Context is a dict), so a carrier's context is built in one step.
        holding = self._trace.set_span_in_context(self._trace.INVALID_SPAN, self._root)
        self._span_key = next(iter(holding)) if isinstance(holding, dict) and holding else None
        self._producer_kind = self._trace.SpanKind.PRODUCER
        self._no_op_providers = (self._trace.ProxyTracerProvider, self._trace.NoOpTracerProvider)
        self._no_op_global = False
        self._no_op_until = 0.0  # monotonic time to look the global provider up again
        self._consumer_kind = self._trace.SpanKind.CONSUMER

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

    def producing(
        self, task_id: str, queue: str, count: int
    ) -> AbstractContextManager[Mapping[str, str] | None]:
        if self._no_op() and not self._trace.get_current_span().get_span_context().is_valid:
            # No SDK and no trace around the trigger: the span would be the invalid
            # current one and the carrier empty.
            return _NOTHING_PRODUCED
        return _Producer(self, task_id, queue, count)

    def triggered(self, runs: Sequence[Run]) -> None:
        span = _PRODUCER.get()
        if span is not None and len(runs) == 1 and span.is_recording():
            span.set_attribute("messaging.message.id", runs[0].id)

    def attempt(
        self, attempt: Attempt
    ) -> AbstractAsyncContextManager[None] | AbstractContextManager[None] | None:
        carrier = attempt.run.trace_carrier
        if not carrier:
            if self._no_op():
                # No SDK and no stored context: the API's tracer would hand back the
                # current (invalid) span and there is no context to make current, so
                # nothing would change; the attempt keeps the path without observers.
                return None
            return _Consumer(self, attempt)
        if self._skip_unsampled or (self._skip_unsampled is None and self._skips()):
            # The common skipped attempt first: a plain traceparent whose flag says "not
            # sampled" needs only its context current, read without the propagator.
            context = self._unsampled(carrier)
            if context is not None:
                return _Carried(self, context)
            creation = self._creation(carrier)
            if not creation[2]:
                return _Carried(self, creation[0])
            return _Consumer(self, attempt, creation)
        if self._no_op():
            # No SDK: no span to start or end, only the stored context to make current.
            return _Carried(self, self._creation(carrier)[0])
        return _Consumer(self, attempt)

    def _no_op(self) -> bool:
        """Whether the tracer provider records nothing: the API's own, with no SDK set
        as the global one. The global one is looked up again at most once a second (the
        lookup reads the process environment), so an SDK set later is seen within it."""
        provider = self._provider
        if provider is not None:
            return type(provider) in self._no_op_providers
        now = time.monotonic()
        if now >= self._no_op_until:
            self._global_provider = self._trace.get_tracer_provider()
            self._no_op_global = type(self._global_provider) in self._no_op_providers
            self._no_op_until = now + 1.0
        return self._no_op_global

    def _skips(self) -> bool:
        """Whether an unsampled carrier is skipped when ``skip_unsampled`` was left
        unset: when the provider's sampler is sure to drop it (see
        :func:`_drops_unsampled_remote_parents`), found once per provider."""
        if self._skip_unsampled is not None:
            return self._skip_unsampled
        provider = self._provider
        if provider is None:
            self._no_op()  # looks the global provider up again, at most once a second
            provider = self._global_provider
        if provider is not self._sampled_by:
            self._sampled_by = provider
            self._skips_for_it = _drops_unsampled_remote_parents(provider)
        return self._skips_for_it

    def _unsampled(self, carrier: Mapping[str, str]) -> Any:
        """:meth:`_remote`'s context for an unsampled carrier, on the shortest path (one
        pattern checks the whole header, sampled flag included); ``None`` where
        :meth:`_remote` must decide."""
        if len(carrier) != 1:
            return None
        header = carrier.get("traceparent")
        if header is None or _UNSAMPLED_TRACEPARENT(header) is None:
            return None
        propagator = self._propagator or self._propagate.get_global_textmap()
        if propagator is not self._checked:
            self._checked, self._standard = propagator, _is_w3c(propagator)
        if not self._standard or self._span_key is None:
            return None
        return self._context.Context({self._span_key: self._carrier_span(header)})

    def _remote(self, carrier: Mapping[str, str]) -> tuple[Any, Any] | None:
        """The context of a carrier holding only a version-00 W3C ``traceparent``, and
        its span, when the propagator is the W3C one: the context the propagator would
        extract, with the span context parsed only when first asked for. ``None`` for
        any other carrier or propagator."""
        if len(carrier) != 1:
            return None
        header = carrier.get("traceparent")
        if header is None:
            return None
        propagator = self._propagator or self._propagate.get_global_textmap()
        if propagator is not self._checked:
            self._checked, self._standard = propagator, _is_w3c(propagator)
        if (
            not self._standard
            or _TRACEPARENT.fullmatch(header) is None
            or header.startswith(_NO_TRACE, 3)  # an invalid parent: the propagator's business
            or header.startswith(_NO_SPAN, 36)
        ):
            return None
        span = self._carrier_span(header)
        if self._span_key is not None:
            return self._context.Context({self._span_key: span}), span
        return self._trace.set_span_in_context(span, self._root), span

    def _creation(self, carrier: dict[str, str]) -> tuple[Any, Any, bool]:
        """The parent context, the creation's span context (``None`` if the carrier
        cannot be parsed) and its sampled flag, for a stored carrier."""
        remote = self._remote(carrier)
        if remote is not None:
            created = remote[1].get_span_context()
            return remote[0], created, created.trace_flags.sampled
        cached = self._last_creation
        if cached is not None and cached[0] == carrier:
            return cached[1], cached[2], cached[3]
        propagator = self._propagator or self._propagate.get_global_textmap()
        extracted = propagator.extract(carrier)
        created = self._trace.get_current_span(extracted).get_span_context()
        if created.is_valid:
            parent, sampled = extracted, created.trace_flags.sampled
        else:
            parent, created, sampled = self._root, None, True  # unparsable: a new root trace
        # The last one is kept: runs of one trigger_many, and a run's retries, share it.
        self._last_creation = (dict(carrier), parent, created, sampled)
        return parent, created, sampled

    def start(
        self, attempt: Attempt, creation: tuple[Any, Any, bool] | None = None
    ) -> tuple[Any, Any]:
        """The started ``execute`` span of ``attempt`` (a child of, and linked to, the
        run's stored carrier) and the context to make current (``None``: the current
        one already is).

        The span's attributes are given at creation, where a sampler sees them. With
        ``skip_unsampled`` and a carrier whose trace was not sampled, there is no span
        (``None``): the context is the carrier's own, so task code still runs in the
        run's trace, not sampled, as a parent-based sampler would have decided. A
        tracer that hands back the parent's own non-recording span (the API's no-op
        tracer) has nothing to end, and the parent context is made current as it is.
        ``creation`` is what the run's carrier was already found to hold, if it was.
        """
        run = attempt.run
        parent: Any = None
        links: Sequence[Any] = ()
        if run.trace_carrier:
            parent, created, sampled = creation or self._creation(run.trace_carrier)
            if not sampled and (self._skip_unsampled or self._skips()):
                return None, parent
            if created is not None:
                links = (self._trace.Link(created),)
        span = (self._tracer or self.tracer).start_span(
            f"execute {run.task_id}",
            context=parent,
            kind=self._consumer_kind,
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
        if span is self._trace.get_current_span(parent):
            return None, parent
        return span, self._trace.set_span_in_context(span, parent)

    def finish(self, span: Any, attempt: Attempt) -> None:
        """Set the outcome (and the error of a failed attempt) and end ``span``."""
        if not span.is_recording():  # not sampled: nothing to add
            span.end()
            return
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
                error_type = (
                    failure.code
                    if failure is not None
                    else outcome.value  # a handler's Outcome.dead_letter: no failure
                    if outcome is AttemptOutcome.DEAD_LETTERED
                    else "unknown"
                )
            span.set_attribute("error.type", error_type)
            message = failure.message if failure is not None else error_type
            if outcome is AttemptOutcome.DEAD_LETTERED:
                reason = attempt.dead_letter_reason
                if reason is not None:
                    span.set_attribute("runlane.dead_letter_reason", reason)
                    message = reason
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))
        span.end()


class _Producer:
    """The ``trigger`` span, current while runs are created; a plain class rather
    than ``start_as_current_span`` (a generator-based manager), as it runs per trigger."""

    __slots__ = ("_count", "_producer", "_queue", "_span", "_task_id", "_token", "_tracing")

    def __init__(self, tracing: OtelTracing, task_id: str, queue: str, count: int) -> None:
        self._tracing = tracing
        self._task_id = task_id
        self._queue = queue
        self._count = count

    def __enter__(self) -> Mapping[str, str] | None:
        tracing = self._tracing
        attributes: dict[str, Any] = {
            "messaging.system": "runlane",
            "messaging.destination.name": self._queue,
            "messaging.operation.name": "trigger",
            "messaging.operation.type": "send",
            "runlane.task_id": self._task_id,
            "runlane.environment": tracing._environment,
        }
        if self._count != 1:
            attributes["messaging.batch.message_count"] = self._count
        span = self._span = tracing.tracer.start_span(
            f"trigger {self._task_id}", kind=tracing._producer_kind, attributes=attributes
        )
        current = tracing._trace.set_span_in_context(span)
        self._token = tracing._context.attach(current)
        self._producer = _PRODUCER.set(span)
        # Injected whether or not the span is sampled: the carrier keeps the trace id
        # and the decision, so every attempt of the run follows it.
        carrier: dict[str, str] = {}
        tracing.propagator.inject(carrier, context=current)
        return carrier or None

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        _PRODUCER.reset(self._producer)
        tracing = self._tracing
        tracing._context.detach(self._token)
        span = self._span
        if isinstance(error, Exception) and span.is_recording():
            span.record_exception(error)
            span.set_status(
                tracing._trace.Status(
                    tracing._trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"
                )
            )
        span.end()


class _Consumer:
    """The ``execute`` span, current from the lease until the outcome is written."""

    __slots__ = ("_attempt", "_creation", "_span", "_token", "_tracing")

    def __init__(
        self,
        tracing: OtelTracing,
        attempt: Attempt,
        creation: tuple[Any, Any, bool] | None = None,
    ) -> None:
        self._tracing = tracing
        self._attempt = attempt
        self._creation = creation

    async def __aenter__(self) -> None:
        tracing = self._tracing
        self._span, current = tracing.start(self._attempt, self._creation)
        self._token = tracing._context.attach(current) if current is not None else None

    async def __aexit__(self, *exc: object) -> None:
        if self._token is not None:
            self._tracing._context.detach(self._token)
        if self._span is not None:
            self._tracing.finish(self._span, self._attempt)


class _Carried:
    """A run's stored context, current while its handler runs, for an attempt with no
    span to open (not sampled, or no SDK): a plain context manager, so the attempt
    settles as it would without observers."""

    __slots__ = ("_context", "_token", "_tracing")

    def __init__(self, tracing: OtelTracing, context: Any) -> None:
        self._tracing = tracing
        self._context = context

    def __enter__(self) -> None:
        self._token = self._tracing._attach(self._context)

    def __exit__(self, *exc: object) -> None:
        self._tracing._detach(self._token)


def otel_tracing(
    tracer_provider: Any = None, propagator: Any = None, *, skip_unsampled: bool | None = None
) -> OtelTracing:
    """An observer tracing triggers (PRODUCER) and attempts (CONSUMER) through the
    stored ``trace_carrier``; ``tracer_provider`` and ``propagator`` default to the
    global ones, looked up when first needed.

    Sampling is the tracer provider's: the decision made for the trigger is stored
    in the carrier, and a parent-based sampler (the SDK's default, and
    ``ParentBased(TraceIdRatioBased(ratio))`` as the observability guide recommends)
    applies it to every attempt. An attempt of a run whose trace was not sampled
    starts no span and runs in the carrier's context (much cheaper) when
    ``skip_unsampled`` is true, or, left unset (``None``), when the provider's
    sampler is the SDK's ``ParentBased`` with its default (drop) for an unsampled
    remote parent, which would drop that span anyway. ``skip_unsampled=True`` skips
    whatever the sampler (one that would sample such an attempt is not asked);
    ``False`` always asks it.

    Raises ``RunlaneError(CONFIGURATION_INVALID)`` without ``opentelemetry-api``.
    """
    return OtelTracing(tracer_provider, propagator, skip_unsampled=skip_unsampled)
