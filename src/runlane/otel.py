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
import math
import re
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from contextvars import Token
from typing import TYPE_CHECKING, Any, NamedTuple

from runlane import Attempt, AttemptOutcome, Observer, Run, __version__
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.runs import stored_trace_carrier as _stored_carrier

if TYPE_CHECKING:
    from runlane.core.observing import ObservedRuntime

__all__ = ["OtelTracing", "otel_tracing"]

#: The producer span of the trigger in progress (to name the run it created).
_PRODUCER: contextvars.ContextVar[Any] = contextvars.ContextVar("runlane_producer", default=None)

_FAILED = (AttemptOutcome.FAILED, AttemptOutcome.RETRIED, AttemptOutcome.DEAD_LETTERED)

#: A valid (ids not all zeros) version-00 W3C traceparent with nothing around it
#: (the form the W3C propagator writes); anything else goes through the propagator.
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}").fullmatch
#: A stored carrier's JSON text that holds only a traceparent of that layout has, once
#: each lowercase hex digit of its bytes is translated to "x", the first shape (compact,
#: as the SQL drivers write it) or the second (as PostgreSQL prints jsonb). A C
#: translation and two comparisons (no hash) cost half of a regex match of the same text.
_HEX_AS_X = bytes.maketrans(b"0123456789abcdef", b"x" * 16)
_STORED_SHAPES = tuple(
    f'{{"traceparent":{space}"xx-{"x" * 32}-{"x" * 16}-xx"}}'.encode().translate(_HEX_AS_X)
    for space in ("", " ")
)
#: In such a text, what the propagator rejects besides the shape: an all-zero span id
#: (or trace id: it starts with these zeros; so do a few valid ones, which take the
#: propagator's path) and version ff. Any other version reads as 00 does.
_ZERO_ID = "-" + "0" * 16
_VERSION_FF = '"ff-'
_TRACE_ID_MASK = (1 << 128) - 1
_SPAN_ID_MASK = (1 << 64) - 1
#: The last hex digit of a traceparent whose flags say "sampled".
_SAMPLED_FLAG = "13579bdf"
#: Each outcome's attribute value, without ``Enum.value``'s Python call.
_OUTCOME_VALUES = {outcome: outcome.value for outcome in AttemptOutcome}
#: What a trigger gets from a tracer that records nothing, outside any trace.
_NOTHING_PRODUCED: AbstractContextManager[Mapping[str, str] | None] = nullcontext(None)
#: How long what was found of the global provider and propagator is trusted (their
#: lookup reads the process environment): one set later is used within this time.
_GLOBALS_TRUSTED_FOR = 1.0

_monotonic = time.monotonic
#: Builds an instance without calling ``__init__``: once per attempt, a Python call
#: is a tenth of the whole cost of one that is skipped.
_new = object.__new__


class _Carrying(NamedTuple):
    """What a stored carrier's context is built and made current with, found once
    per process from the OpenTelemetry API (imported only when tracing is set up)."""

    #: A non-recording span of a checked traceparent, parsed when first asked.
    span: Any
    #: The key under which a context holds its span (a ``Context`` is a dict), read
    #: once through the API; ``None`` if it is not found so (the propagator then
    #: reads every carrier).
    span_key: Any
    #: The context variable the API's ``attach`` sets and ``detach`` resets, when that
    #: is all they do (``None`` otherwise).
    variable: contextvars.ContextVar[Any] | None
    #: Make a context current, and undo it: the API's ``attach`` and ``detach``, or
    #: that variable's own ``set`` and ``reset``.
    attach: Any
    detach: Any


_CARRYING: _Carrying | None = None


def _carrying(context_api: Any, trace_api: Any) -> _Carrying:
    """See :class:`_Carrying`; built on first use."""
    global _CARRYING
    if _CARRYING is not None:
        return _CARRYING

    trace_flags = [trace_api.TraceFlags(flags) for flags in range(256)]  # shared: immutable

    class CarrierSpan(trace_api.NonRecordingSpan):  # type: ignore[misc]
        """A ``NonRecordingSpan`` of a checked W3C ``traceparent`` (``_header``: the
        header, or a stored carrier's text that ends with it and ``"}``), built without
        ``__init__``; its span context (the one the W3C propagator extracts: remote, no
        trace state) is parsed when first asked for: an attempt that is not sampled
        rarely asks."""

        __slots__ = ("_header",)
        _parsed: Any = None

        def get_span_context(self) -> Any:
            parsed = self._parsed
            if parsed is None:
                header = self._header
                if header[-1] == "}":
                    header = header[-57:-2]
                # Version, trace id, span id and flags in one parse: a third of three.
                fields = int(header.replace("-", ""), 16)
                parsed = self._parsed = trace_api.SpanContext(
                    fields >> 72 & _TRACE_ID_MASK,
                    fields >> 8 & _SPAN_ID_MASK,
                    True,
                    trace_flags[fields & 0xFF],
                )
            return parsed

        @property
        def _context(self) -> Any:  # what the API's own methods read (its repr)
            return self.get_span_context()

    holding = trace_api.set_span_in_context(trace_api.INVALID_SPAN, context_api.Context())
    span_key = next(iter(holding)) if isinstance(holding, dict) and len(holding) == 1 else None
    variable = _current_context_variable(context_api)
    if variable is None:
        _CARRYING = _Carrying(CarrierSpan, span_key, None, context_api.attach, context_api.detach)
    else:
        _CARRYING = _Carrying(CarrierSpan, span_key, variable, variable.set, variable.reset)
    return _CARRYING


def _current_context_variable(context_api: Any) -> contextvars.ContextVar[Any] | None:
    """The context variable that the API's ``attach`` sets and ``detach`` resets, when
    its runtime context is the standard one that does only that (as it is unless
    ``OTEL_PYTHON_CONTEXT`` chooses another); ``None`` otherwise. Setting it directly
    has the same effect without two Python calls each way."""
    try:
        from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

        runtime = context_api._RUNTIME_CONTEXT
    except (ImportError, AttributeError):
        return None
    variable = getattr(runtime, "_current_context", None)
    if type(runtime) is not ContextVarsRuntimeContext or not isinstance(
        variable, contextvars.ContextVar
    ):
        return None
    probe = context_api.Context()
    token = context_api.attach(probe)
    try:
        same = variable.get() is probe
    finally:
        context_api.detach(token)
    return variable if same else None


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
        self._tracer: Any = None
        self._environment = ""
        self._last_creation: tuple[dict[str, str], Any, Any, bool] | None = None
        self._root = self._context.Context()
        carrying = _carrying(self._context, self._trace)
        self._carrier_span, self._span_key = carrying.span, carrying.span_key
        self._variable = carrying.variable
        self._attach, self._detach = carrying.attach, carrying.detach
        self._context_type = self._context.Context
        self._producer_kind = self._trace.SpanKind.PRODUCER
        self._consumer_kind = self._trace.SpanKind.CONSUMER
        self._no_op_providers = (self._trace.ProxyTracerProvider, self._trace.NoOpTracerProvider)
        # What the provider and propagator in use allow, found by _refresh: trusted
        # until _fresh_until (monotonic time; for ever when neither is a global one).
        self._fresh_until = -math.inf
        self._global_provider: Any = None
        self._sampled_by: Any = self  # the provider _drops_unsampled was found for
        self._drops_unsampled = False
        self._checked: Any = None  # the propagator _standard was found for
        #: The propagator is the W3C one: a plain traceparent is read here.
        self._standard = False
        #: The provider records spans (it is not the API's no-op one).
        self._recording = False
        #: An attempt whose stored carrier was not sampled starts no span.
        self._skipping = False
        #: Both of the last two: such an attempt's plain traceparent decides it here.
        self._plain_unsampled = False

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
        now = _monotonic()
        if now >= self._fresh_until:
            self._refresh(now)
        if not self._recording and not self._trace.get_current_span().get_span_context().is_valid:
            # No SDK and no trace around the trigger: the span would be the invalid
            # current one and the carrier empty.
            return _NOTHING_PRODUCED
        return _Producer(self, task_id, queue, count)

    def triggered(self, runs: Sequence[Run]) -> None:
        span = _PRODUCER.get()
        if span is not None and len(runs) == 1 and span.is_recording():
            span.set_attribute("messaging.message.id", runs[0].id)

    def attempt(self, attempt: Attempt) -> AbstractContextManager[None] | Token[Any] | None:
        run = attempt.run
        stored: Any = _stored_carrier(run)
        now = _monotonic()
        if now >= self._fresh_until:
            self._refresh(now)
        if self._plain_unsampled and stored:
            # The usual attempt: a valid traceparent alone, checked in the stored text
            # (a SQL driver's run, never decoded for it) or in the carrier.
            if type(stored) is str:
                if (
                    stored.encode().translate(_HEX_AS_X) in _STORED_SHAPES
                    and _ZERO_ID not in stored
                    and _VERSION_FF not in stored
                ):
                    header, flag = stored, stored[-3]
                else:
                    header = None
            elif type(stored) is dict and len(stored) == 1:
                header = stored.get("traceparent")
                if header is not None:
                    if _TRACEPARENT(header) is None:
                        header = None
                    else:
                        flag = header[54]
            else:
                header = None
            if header is not None:
                span = _new(self._carrier_span)
                span._header = header
                context = self._context_type({self._span_key: span})
                if flag not in _SAMPLED_FLAG or not self._recording:
                    # Not sampled (or no SDK): its context, current until the handler
                    # returns, is the whole scope, built and set without a Python call.
                    variable = self._variable
                    if variable is not None:
                        return variable.set(context)
                    return _Carried(self, context)
                return _Consumer(self, attempt, (context, span.get_span_context(), True))
        # Stored text (or bytes) is decoded here, by the read.
        carrier = stored if stored is None or type(stored) is dict else run.trace_carrier
        if not carrier:
            if self._recording:
                return _Consumer(self, attempt)
            # No SDK and no stored context: the API's tracer would hand back the
            # current (invalid) span and there is no context to make current, so
            # nothing would change; the attempt keeps the path without observers.
            return None
        if not self._recording:
            # No SDK: no span to start or end, only the stored context to make current.
            return self._hold(self._creation(carrier)[0])
        if self._skipping:
            creation = self._creation(carrier)
            if not creation[2]:
                return self._hold(creation[0])
            return _Consumer(self, attempt, creation)
        return _Consumer(self, attempt)

    def _hold(self, context: Any) -> Token[Any] | _Carried:
        """``context`` made current until the handler returns: set now (the token the
        runtime resets), or through the API's ``attach`` when the handler starts."""
        variable = self._variable
        return variable.set(context) if variable is not None else _Carried(self, context)

    def _refresh(self, now: float) -> None:
        """Find what the provider and propagator in use allow (see ``__init__``). The
        global ones are looked up again at most once a :data:`_GLOBALS_TRUSTED_FOR`."""
        provider = self._provider
        if provider is None:
            provider = self._global_provider = self._trace.get_tracer_provider()
        propagator = self._propagator or self._propagate.get_global_textmap()
        if provider is not self._sampled_by:
            self._sampled_by = provider
            self._drops_unsampled = _drops_unsampled_remote_parents(provider)
        if propagator is not self._checked:
            self._checked = propagator
            self._standard = self._span_key is not None and _is_w3c(propagator)
        recording = type(provider) not in self._no_op_providers
        skip = self._skip_unsampled
        skipping = self._drops_unsampled if skip is None else skip
        self._recording, self._skipping = recording, skipping
        self._plain_unsampled = self._standard and (skipping or not recording)
        lasting = self._provider is not None and self._propagator is not None
        self._fresh_until = math.inf if lasting else now + _GLOBALS_TRUSTED_FOR

    def _creation(self, carrier: dict[str, str]) -> tuple[Any, Any, bool]:
        """The parent context, the creation's span context (``None`` if the carrier
        cannot be parsed) and its sampled flag, for a stored carrier.

        A carrier holding only a valid version-00 W3C ``traceparent`` is read here
        when the propagator is the W3C one: the context is the one the propagator
        would extract, its span context parsed only when first asked for."""
        if len(carrier) == 1 and self._standard:
            header = carrier.get("traceparent")
            if header is not None and _TRACEPARENT(header) is not None:
                span = _new(self._carrier_span)
                span._header = header
                parent = self._context_type({self._span_key: span})
                return parent, span.get_span_context(), header[54] in _SAMPLED_FLAG
            # Any other: an invalid parent, say, is the propagator's business.
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

        The span's attributes are given at creation, where a sampler sees them. When
        unsampled attempts are skipped and the carrier's trace was not sampled, there
        is no span (``None``): the context is the carrier's own, so task code still
        runs in the run's trace, not sampled, as a parent-based sampler would have
        decided. A tracer that hands back the parent's own non-recording span (the
        API's no-op tracer) has nothing to end, and the parent context is made current
        as it is. ``creation`` is what the run's carrier was already found to hold, if
        it was.
        """
        run = attempt.run
        parent: Any = None
        links: Sequence[Any] = ()
        if creation is None and run.trace_carrier:
            creation = self._creation(run.trace_carrier)
        if creation is not None:
            parent, created, sampled = creation
            if not sampled and self._skipping:
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
        key = self._span_key
        if parent is None or key is None:
            if span is self._trace.get_current_span(parent):
                return None, parent
            return span, self._trace.set_span_in_context(span, parent)
        # What get_current_span and set_span_in_context do, each in one step.
        if span is parent.get(key, self._trace.INVALID_SPAN):
            return None, parent
        return span, self._context.Context({**parent, key: span})

    def finish(self, span: Any, attempt: Attempt) -> None:
        """Set the outcome (and the error of a failed attempt) and end ``span``.

        A span that records nothing (a sampler's drop) ignores all of it: asking it
        first would cost every recorded span a call."""
        outcome = attempt.outcome
        if outcome is not None:
            span.set_attribute("runlane.outcome", _OUTCOME_VALUES[outcome])
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
        self._token = tracing._attach(current)
        self._producer = _PRODUCER.set(span)
        # Injected whether or not the span is sampled: the carrier keeps the trace id
        # and the decision, so every attempt of the run follows it.
        carrier: dict[str, str] = {}
        tracing.propagator.inject(carrier, context=current)
        return carrier or None

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        _PRODUCER.reset(self._producer)
        tracing = self._tracing
        tracing._detach(self._token)
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
    """The ``execute`` span: started just before the handler, its context current while
    the handler runs, ended once the attempt is over (its outcome written). A plain
    context, so the attempt settles in the worker's batches as one without observers
    does: its span ends from the batch's flush, which needs none of its context."""

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

    def __enter__(self) -> None:
        tracing = self._tracing
        self._span, current = tracing.start(self._attempt, self._creation)
        self._token = tracing._attach(current) if current is not None else None

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            self._tracing._detach(self._token)

    def attempt_ended(self) -> None:
        span, self._span = self._span, None
        if span is not None:
            self._tracing.finish(span, self._attempt)


class _Carried:
    """A run's stored context, current while its handler runs, for an attempt with no
    span to open, through the API's ``attach`` and ``detach`` (when its runtime
    context is not the standard context variable)."""

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
    global ones, looked up when first needed (and again at most once a second).

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
