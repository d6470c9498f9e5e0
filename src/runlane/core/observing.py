"""Observers: how metrics, tracing and live output watch the runtime.

Core imports nothing third-party: the Prometheus and OpenTelemetry adapters
(``runlane.metrics``, ``runlane.otel``) and the CLI's live lines are
:class:`Observer` subclasses that the runtime calls at a few points. Every hook
is a no-op here, so a subclass overrides only what it needs.

An observer that raises is logged once per (observer, hook) and otherwise
ignored: it never fails a trigger or an attempt.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from contextvars import Token
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from runlane.model.transitions import project
from runlane.types.errors import configuration_error
from runlane.types.runs import Run, RunFailure, RunStatus, TickReport

if TYPE_CHECKING:
    from datetime import datetime

    from runlane.model.definitions import TaskDef
    from runlane.model.queue_defs import QueueDef
    from runlane.types.records import Transition

logger = logging.getLogger("runlane.observers")


class Outcome(StrEnum):
    """How one attempt ended, as metrics, spans and log lines name it."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRIED = "retried"
    RELEASED = "released"
    CANCELLED = "cancelled"
    LEASE_LOST = "lease_lost"
    #: A subscription delivery parked for an operator (its budget spent, or refused).
    DEAD_LETTERED = "dead_lettered"


#: The outcome an attempt's settle wrote, by the status it left the run in.
OUTCOME_BY_STATUS: Mapping[RunStatus, Outcome] = {
    RunStatus.SUCCEEDED: Outcome.SUCCEEDED,
    RunStatus.FAILED: Outcome.FAILED,
    RunStatus.RETRYING: Outcome.RETRIED,
    RunStatus.RELEASED: Outcome.RELEASED,
    RunStatus.CANCELLED: Outcome.CANCELLED,
    RunStatus.DEAD_LETTERED: Outcome.DEAD_LETTERED,
}


class Attempt:
    """One attempt as observers see it; filled in as it goes.

    ``run`` is the run as leased for this attempt (``run.attempt`` is its
    number). Once the handler is done, ``duration`` (handler wall time, seconds),
    ``error`` (what it raised, if anything) and ``failure`` (the stored failure)
    are set; once the outcome is written, ``outcome``, ``settled`` (the run as
    settled, or as storage holds it when the lease was lost), ``delay_seconds``
    (retry or release delay), ``release_reason`` and, for a dead-lettered delivery,
    ``dead_letter_reason``.
    """

    __slots__ = (
        "_projection",
        "_settled",
        "dead_letter_reason",
        "delay_seconds",
        "duration",
        "error",
        "failure",
        "outcome",
        "release_reason",
        "run",
        "worker_id",
    )

    def __init__(
        self,
        run: Run,
        worker_id: str,
        duration: float = 0.0,
        error: BaseException | None = None,
        failure: RunFailure | None = None,
        outcome: Outcome | None = None,
        settled: Run | None = None,
        delay_seconds: float | None = None,
        release_reason: str | None = None,
        dead_letter_reason: str | None = None,
    ) -> None:
        self.run = run
        self.worker_id = worker_id
        self.duration = duration
        self.error = error
        self.failure = failure
        self.outcome = outcome
        self._settled = settled
        self._projection: tuple[Run, Transition, datetime] | None = None
        self.delay_seconds = delay_seconds
        self.release_reason = release_reason
        self.dead_letter_reason = dead_letter_reason

    @property
    def settled(self) -> Run | None:
        """The run as settled (built on first read: most observers never look)."""
        projection = self._projection
        if projection is not None:
            self._settled = project(*projection)
            self._projection = None
        return self._settled

    @settled.setter
    def settled(self, run: Run | None) -> None:
        self._settled = run
        self._projection = None

    def settled_as(self, run: Run, transition: Transition, at: datetime) -> None:
        """The outcome was written: ``settled`` is ``run`` after ``transition`` at ``at``
        (the record is built only if an observer reads it)."""
        self._settled = None
        self._projection = (run, transition, at)

    def __repr__(self) -> str:
        return (
            f"Attempt(run={self.run.id!r}, attempt={self.run.attempt}, "
            f"worker_id={self.worker_id!r}, outcome={self.outcome}, duration={self.duration})"
        )


class ObservedRuntime(Protocol):
    """What an observer learns of the runtime it is attached to (``Runlane`` is one)."""

    @property
    def environment(self) -> str:
        """The environment the runtime's runs belong to."""
        ...

    @property
    def tasks(self) -> Mapping[str, TaskDef[Any]]:
        """Registered tasks by id."""
        ...

    @property
    def queues(self) -> Mapping[str, QueueDef]:
        """Registered queues by name."""
        ...


class Observer:
    """Base class of runtime observers: every hook does nothing until overridden.

    Register with ``Runlane(observers=[...])`` or ``rl.add_observer(observer)``.
    Hooks run on the event loop in the middle of triggers and attempts: keep
    them quick, and never block.
    """

    def attached(self, runtime: ObservedRuntime) -> None:
        """Called once when the observer is added to ``runtime`` (its environment and
        registry are known from here)."""

    def producing(
        self, task_id: str, queue: str, count: int
    ) -> AbstractContextManager[Mapping[str, str] | None]:
        """Wraps creating ``count`` runs (trigger, trigger_many, run_now, a schedule's
        occurrence, rerun, manual retry). The value it yields, if not ``None``, is the
        trace carrier stored with runs whose caller passed none."""
        return contextlib.nullcontext()

    def triggered(self, runs: Sequence[Run]) -> None:
        """Runs this process created (not those an idempotency or singleton key returned)."""

    def started(self, attempt: Attempt) -> None:
        """An attempt begins: its lease is held and its handler not called yet (before
        any ``attempt`` context is entered). Cheaper than ``attempt`` for an observer
        that only counts."""

    def attempt(
        self, attempt: Attempt
    ) -> AbstractAsyncContextManager[None] | AbstractContextManager[None] | Token[Any] | None:
        """Wraps one attempt (worker, ``execute_next``, ``run_now``,
        ``execute_delivery``); it is entered in the context the handler runs in, so a
        context variable it sets is visible to task code (sync tasks included).

        An async context manager wraps the attempt from just after its lease is held
        until its outcome is written. A plain (sync) one wraps only the handler call:
        it is left as soon as the handler returns, before the outcome is written, so
        the attempt still settles as it does without observers (its outcome may be
        written in a later batch, after the slot has moved on) and ``settled`` is
        called when it is. Use it for what needs no outcome, such as making a context
        current; it is cheaper. A plain one may also have an ``attempt_ended()``
        method, called once the attempt is over: its outcome written (after
        ``settled``), its lease found lost, or its write failed (``outcome`` is then
        ``None``). It is called from wherever the outcome was written, usually not the
        handler's context, so end things there, such as a span whose context was
        current around the handler alone; the attempt still settles in the worker's
        batches.

        Cheapest of all, for a context that is one context variable's value: set it
        here and return the :class:`contextvars.Token` (``return variable.set(value)``).
        The runtime resets it (``token.var.reset(token)``) where it would leave a
        plain context manager, with no call into the observer: the variable holds the
        value from this hook's return until the handler returns.

        Return ``None`` when there is nothing to wrap for this attempt: the attempt
        then settles as it does without observers, and ``settled`` is still called."""
        return contextlib.nullcontext()

    def settled(self, attempt: Attempt) -> None:
        """An attempt's outcome was written (or its lease was lost): ``attempt`` holds
        the run before (``run``) and after (``settled``), the duration and the outcome."""

    def lease_expired(self, run: Run) -> None:
        """Maintenance in this process recovered ``run``'s expired lease (its worker died)."""

    def ticked(self, report: TickReport) -> None:
        """A maintenance pass finished."""

    def slots(self, busy: int, total: int) -> None:
        """A worker's slots changed: ``busy`` of ``total`` hold an attempt."""


#: Hooks an observer may override; the runtime calls each only on observers that do.
HOOKS = (
    "producing",
    "triggered",
    "started",
    "attempt",
    "settled",
    "lease_expired",
    "ticked",
    "slots",
)


class Observers:
    """The runtime's observers, called with their failures isolated.

    Each hook keeps the list of observers that override it, found once when an
    observer is added: a hook nobody overrides costs one empty loop, and the
    per-attempt ones (``started``, ``settled``, ``slots``) are called as bound
    methods kept beside them.
    """

    __slots__ = (
        "_bound",
        "_hooks",
        "_logged",
        "_runtime",
        "hears_settled",
        "hears_slots",
        "hears_started",
        "items",
        "sole_attempt",
        "wraps_attempts",
    )

    def __init__(self, runtime: ObservedRuntime, observers: Sequence[Observer] = ()) -> None:
        self.items: list[Observer] = []
        self._runtime = runtime
        self._logged: set[tuple[int, str]] = set()
        #: Per hook, the observers that override it.
        self._hooks: dict[str, list[Observer]] = {hook: [] for hook in HOOKS}
        #: Per hook, (observer, its bound hook) of the same observers.
        self._bound: dict[str, list[tuple[Observer, Callable[..., Any]]]] = {
            hook: [] for hook in HOOKS
        }
        #: Whether any observer wraps attempts in a context (``attempt``), hears their
        #: start and their end (``started``, ``settled``) and a worker's slots
        #: (``slots``): read on every attempt, where even a call to a hook that no
        #: observer overrides would cost a Python call.
        self.wraps_attempts = False
        #: The ``attempt`` hook (bound) of the one observer that overrides it, or
        #: ``None`` with none or several: the runtime calls it itself (see
        #: :meth:`sole_scope`), a Python call less per attempt than :meth:`attempt`.
        self.sole_attempt: Callable[[Attempt], Any] | None = None
        self.hears_started = False
        self.hears_settled = False
        self.hears_slots = False
        for observer in observers:
            self.add(observer)

    def add(self, observer: Observer) -> None:
        """Append ``observer``; it must be an :class:`Observer`."""
        if not isinstance(observer, Observer):
            raise configuration_error(
                f"observers must subclass runlane.Observer; got {type(observer).__name__}."
            )
        self.items.append(observer)
        for hook, overriding in self._hooks.items():
            if getattr(type(observer), hook) is not getattr(Observer, hook):
                overriding.append(observer)
                self._bound[hook].append((observer, getattr(observer, hook)))
        self.wraps_attempts = bool(self._hooks["attempt"])
        hooked = self._bound["attempt"]
        self.sole_attempt = hooked[0][1] if len(hooked) == 1 else None
        self.hears_started = bool(self._hooks["started"])
        self.hears_settled = bool(self._hooks["settled"])
        self.hears_slots = bool(self._hooks["slots"])
        try:
            observer.attached(self._runtime)
        except Exception:
            self.failed(observer, "attached")

    def __bool__(self) -> bool:
        return bool(self.items)

    @property
    def traces_producing(self) -> bool:
        """Whether an observer wraps run creation (``producing``: a producer span)."""
        return bool(self._hooks["producing"])

    def failed(self, observer: Observer, hook: str) -> None:
        """Log a raising hook once per (observer, hook); the caller carries on."""
        key = (id(observer), hook)
        if key in self._logged:
            return
        self._logged.add(key)
        logger.exception(
            "observer %s raised in %s (ignored; logged once)", type(observer).__name__, hook
        )

    def call(self, hook: str, *args: Any) -> None:
        """Call ``hook(*args)`` on every observer that overrides it."""
        for observer, bound in self._bound[hook]:
            try:
                bound(*args)
            except Exception:
                self.failed(observer, hook)

    def started(self, attempt: Attempt) -> None:
        """Every observer's ``started`` (once per attempt: no dispatch by name)."""
        for observer, bound in self._bound["started"]:
            try:
                bound(attempt)
            except Exception:
                self.failed(observer, "started")

    def settled(self, attempt: Attempt) -> None:
        """Every observer's ``settled``."""
        for observer, bound in self._bound["settled"]:
            try:
                bound(attempt)
            except Exception:
                self.failed(observer, "settled")

    def slots(self, busy: int, total: int) -> None:
        """Every observer's ``slots``."""
        for observer, bound in self._bound["slots"]:
            try:
                bound(busy, total)
            except Exception:
                self.failed(observer, "slots")

    @contextlib.contextmanager
    def producing(self, task_id: str, queue: str, count: int) -> Iterator[dict[str, str] | None]:
        """Enter every observer's ``producing``; the first carrier one of them yields.

        An error of the body reaches each observer's exit (a span records it) and
        then the caller; an observer's own error, on entry or exit, is only logged.
        """
        entered: list[tuple[Observer, AbstractContextManager[Mapping[str, str] | None]]] = []
        carrier: dict[str, str] | None = None
        for observer in self._hooks["producing"]:
            try:
                manager = observer.producing(task_id, queue, count)
                value = manager.__enter__()
                if carrier is None and value:
                    carrier = {str(k): str(v) for k, v in value.items()}
            except Exception:
                self.failed(observer, "producing")
                continue
            entered.append((observer, manager))
        error: BaseException | None = None
        try:
            yield carrier
        except BaseException as raised:
            error = raised
            raise
        finally:
            info = (type(error), error, error.__traceback__) if error else (None, None, None)
            for observer, manager in reversed(entered):
                try:
                    manager.__exit__(*info)  # never swallows: its return value is ignored
                except Exception:
                    self.failed(observer, "producing")

    def attempt(self, attempt: Attempt) -> AttemptScope | HandlerScope | None:
        """Every observer's ``attempt`` (with several; with one, the runtime calls
        :attr:`sole_attempt` itself): an :class:`AttemptScope` around the body when
        one of them returned an async context (``settled`` reported before leaving), a
        :class:`HandlerScope` around the handler call when all of them returned plain
        ones or tokens, or ``None`` when none of them has a context for this attempt
        (each returned ``None``, or raised, which is logged)."""
        hooked = self._bound["attempt"]
        managers: list[tuple[Observer, Any]] | None = None
        waits = False
        for observer, bound in hooked:
            try:
                manager = bound(attempt)
            except Exception:
                self.failed(observer, "attempt")
                continue
            if type(manager) is Token:
                manager = _Resetting(manager)
            if manager is not None:
                if not waits and hasattr(manager, "__aenter__"):
                    waits = True
                if managers is None:
                    managers = [(observer, manager)]
                else:
                    managers.append((observer, manager))
        if managers is None:
            return None
        if waits:
            return AttemptScope(self, attempt, managers)
        return HandlerScope(self, managers)

    def sole_scope(self, manager: Any) -> HandlerScope:
        """The :class:`HandlerScope` of the plain context manager :attr:`sole_attempt`
        returned (an async one the attempt enters and leaves itself)."""
        return HandlerScope(self, [(self._bound["attempt"][0][0], manager)])

    def sole_attempt_failed(self) -> None:
        """Log that :attr:`sole_attempt` raised, or that resetting the token it returned
        did (once); the attempt carries on."""
        self.failed(self._bound["attempt"][0][0], "attempt")


class _Resetting:
    """A token an observer's ``attempt`` returned, beside other observers' contexts:
    left as they are, by resetting it (it was set when returned)."""

    __slots__ = ("_token",)

    def __init__(self, token: Token[Any]) -> None:
        self._token = token

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        self._token.var.reset(self._token)


class AttemptScope:
    """Enters the observers' attempt contexts in order and leaves them in reverse, once
    the outcome is written (a plain class: this runs once per attempt). A plain (sync)
    context among them is held as long as the async ones."""

    __slots__ = ("_attempt", "_managers", "_observers")

    def __init__(
        self,
        observers: Observers,
        attempt: Attempt,
        managers: list[tuple[Observer, Any]],
    ) -> None:
        self._observers = observers
        self._attempt = attempt
        #: The observers' contexts; after entering, only those that entered.
        self._managers = managers

    async def __aenter__(self) -> None:
        observers = self._observers
        entered = []
        for observer, manager in self._managers:
            try:
                if hasattr(manager, "__aenter__"):
                    await manager.__aenter__()
                else:
                    manager.__enter__()
            except Exception:
                observers.failed(observer, "attempt")
                continue
            entered.append((observer, manager))
        self._managers = entered

    async def __aexit__(self, *exc: object) -> None:
        observers, attempt = self._observers, self._attempt
        if attempt.outcome is not None:
            for observer, bound in observers._bound["settled"]:  # Observers.settled, inline
                try:
                    bound(attempt)
                except Exception:
                    observers.failed(observer, "settled")
        for observer, manager in reversed(self._managers):
            plain = not hasattr(manager, "__aexit__")
            try:
                if plain:
                    manager.__exit__(None, None, None)
                else:
                    await manager.__aexit__(None, None, None)
            except Exception:
                observers.failed(observer, "attempt")
            if not plain:
                continue
            # A plain context hears the end even if its exit raised, as beside a handler.
            ended = getattr(manager, "attempt_ended", None)
            if ended is not None:
                try:
                    ended()
                except Exception:
                    observers.failed(observer, "attempt")


class HandlerScope:
    """The observers' plain (sync) attempt contexts, entered in order just before the
    handler and left in reverse as soon as it returns; the outcome is written after,
    as without observers. A context with an ``attempt_ended`` method is told, through
    :meth:`end`, once the attempt is over."""

    __slots__ = ("_ending", "_managers", "_observers")

    def __init__(
        self, observers: Observers, managers: list[tuple[Observer, AbstractContextManager[None]]]
    ) -> None:
        self._observers = observers
        #: The observers' contexts; after entering, only those that entered.
        self._managers = managers
        #: The ``attempt_ended`` methods of the contexts entered that have one.
        self._ending: list[tuple[Observer, Callable[[], object]]] | None = None

    def enter(self) -> bool:
        """Enter every context (one that raises is logged and left out); whether one of
        those entered waits to hear the end (:meth:`end`)."""
        managers = self._managers
        if len(managers) == 1:  # the usual case: one tracing observer
            observer, manager = managers[0]
            try:
                manager.__enter__()
            except Exception:
                self._observers.failed(observer, "attempt")
                self._managers = []
                return False
            ended = getattr(manager, "attempt_ended", None)
            if ended is None:
                return False
            self._ending = [(observer, ended)]
            return True
        entered = []
        for observer, manager in managers:
            try:
                manager.__enter__()
            except Exception:
                self._observers.failed(observer, "attempt")
                continue
            entered.append((observer, manager))
            ended = getattr(manager, "attempt_ended", None)
            if ended is not None:
                if self._ending is None:
                    self._ending = []
                self._ending.append((observer, ended))
        self._managers = entered
        return self._ending is not None

    def leave(self) -> None:
        """Leave the contexts entered, in reverse (one that raises is logged)."""
        for observer, manager in reversed(self._managers):
            try:
                manager.__exit__(None, None, None)  # never swallows: its value is ignored
            except Exception:
                self._observers.failed(observer, "attempt")

    def end(self) -> None:
        """The attempt is over: its outcome written (``settled`` heard first), its lease
        found lost, or its write failed. Each context that has ``attempt_ended`` hears
        it, once, wherever the outcome was written (often a batch's flush, not the
        handler's context)."""
        ending, self._ending = self._ending, None
        for observer, ended in ending or ():
            try:
                ended()
            except Exception:
                self._observers.failed(observer, "attempt")
