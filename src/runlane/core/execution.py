"""One attempt of one leased run: call the handler, keep the lease alive, settle."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runlane.core.batching import TransitionBatcher
from runlane.core.delivering import (
    Ended,
    HandlerEnd,
    Subscriptions,
    settle_delivery_attempt,
)
from runlane.core.observing import OUTCOME_BY_STATUS, Attempt, Outcome
from runlane.model.context import Context, Release, Signal, SignalReason
from runlane.model.handler_calls import HandlerEnds, being_cancelled, call_handler
from runlane.model.payloads import MAX_PAYLOAD_DEPTH, payload_for_handler
from runlane.model.transitions import (
    AttemptOutcome,
    Failed,
    Released,
    Succeeded,
    sanitize_exception,
    settle_attempt,
)
from runlane.model.transitions import project as project_run
from runlane.types.durations import Duration, parse_duration, parse_optional_duration
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.records import CreateOutcome, LeaseRequest, NewRun, QueuePolicy, Transition
from runlane.types.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from runlane.types.runs import Run, RunFailure, RunStatus
from runlane.types.storable_text import storable, unstorable, unstorable_json

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from runlane.core.observing import Observers
    from runlane.core.store import StoreScope
    from runlane.model.definitions import TaskDef

logger = logging.getLogger("runlane.execution")

DEFAULT_LEASE_DURATION = 30.0
#: Settles that lose a compare-and-set race are re-read and recomputed this often.
MAX_SETTLE_ATTEMPTS = 5
#: Results obey the payloads' nesting cap: readers decode them recursively, so a deeper
#: one would fail where it is read (in any process), not where it was made.
MAX_RESULT_DEPTH = MAX_PAYLOAD_DEPTH
#: A failed attempt keeps at most this many characters of its formatted traceback
#: (the innermost frames and the exception line, where the cause usually is).
MAX_TRACEBACK_CHARS = 8192


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """How long a lease lasts and how often it is renewed."""

    duration: float = DEFAULT_LEASE_DURATION
    heartbeat_interval: float | None = None

    @property
    def interval(self) -> float:
        """Heartbeat every third of the lease unless told otherwise."""
        return self.heartbeat_interval or self.duration / 3

    @classmethod
    def resolve(
        cls,
        default_duration: float,
        lease_duration: Duration | None,
        heartbeat_interval: Duration | None,
    ) -> LeaseSettings:
        """A call's lease options, the duration defaulting to ``default_duration``."""
        duration = parse_optional_duration(lease_duration, name="lease_duration", allow_zero=False)
        interval = parse_optional_duration(
            heartbeat_interval, name="heartbeat_interval", allow_zero=False
        )
        settings = cls(duration or default_duration, interval)
        if settings.interval >= settings.duration:
            raise configuration_error("heartbeat_interval must be shorter than lease_duration.")
        return settings


class AttemptRunner:
    """Runs attempts for one runtime; shared by workers, ``execute_next`` and ``run_now``."""

    def __init__(
        self,
        store: StoreScope,
        tasks: Mapping[str, TaskDef[Any]],
        observers: Observers,
        threads: Callable[[], Executor],
        subscriptions: Subscriptions,
    ) -> None:
        """Run attempts of ``tasks`` against ``store``, seen by ``observers``; sync
        task functions run on ``threads()`` (called when one first runs, so a runtime
        that only runs async tasks never starts a pool). Delivery runs call the
        handlers of ``subscriptions``."""
        self._store = store
        self._tasks = tasks
        self._subscriptions = subscriptions
        self._observers = observers
        self._threads = threads
        self._settles = TransitionBatcher(store)
        self._keeper = _LeaseKeeper()

    def lease_request(self, worker_id: str, settings: LeaseSettings) -> LeaseRequest:
        """A lease from now for ``settings.duration``."""
        return LeaseRequest(worker_id, self._store.now() + timedelta(seconds=settings.duration))

    async def execute_next(
        self, queues: Sequence[QueuePolicy], settings: LeaseSettings, owner: str
    ) -> Run | None:
        """Claim one due run of ``queues`` for ``owner``, execute one attempt and return
        the run as settled (``None`` when nothing is due)."""
        store = self._store
        lease = self.lease_request(owner, settings)
        claimed = await store.storage.claim_due_runs(
            store.environment, queues, 1, lease, store.now()
        )
        if not claimed:
            return None
        return await self.execute(claimed[0], settings)

    async def create_leased(
        self, new: NewRun, settings: LeaseSettings, owner: str
    ) -> CreateOutcome:
        """Create ``new`` already leased to ``owner`` (``run_now``), so no worker can
        claim it first; an existing run its keys point at comes back as it is."""
        store = self._store
        lease = self.lease_request(owner, settings)
        (outcome,) = await store.storage.create_runs(
            store.environment, [new], store.now(), lease=lease
        )
        return outcome

    async def run_now(self, new: NewRun, settings: LeaseSettings, owner: str) -> Run:
        """Create ``new`` leased to ``owner`` and execute one attempt inline; a run its
        keys point at instead comes back untouched."""
        observers = self._observers
        if not observers:
            outcome = await self.create_leased(new, settings, owner)
        else:
            with observers.producing(new.task_id, new.queue, 1) as carrier:
                if carrier is not None and new.trace_carrier is None:
                    new = replace(new, trace_carrier=carrier)
                outcome = await self.create_leased(new, settings, owner)
                if outcome.created:
                    observers.call("triggered", [outcome.run])
        if not outcome.created:
            return outcome.run
        return await self.execute(outcome.run, settings)

    async def execute(
        self,
        run: Run,
        settings: LeaseSettings,
        *,
        stop: Signal | None = None,
        max_attempt_duration: float | None = None,
        batcher: TransitionBatcher | None = None,
        project: bool = True,
    ) -> Run:
        """Execute the attempt ``run`` is leased for and return the run as settled.

        Observers see it from here (the lease is held) until the outcome is written.
        ``batcher`` and ``project`` are as for :meth:`settle`; a worker uses
        :meth:`begin` instead, to free its slot between the two steps.
        """
        attempt = self.begin(
            run,
            settings,
            stop=stop,
            max_attempt_duration=max_attempt_duration,
            batcher=batcher,
            project=project,
        )
        await attempt.call()
        return await attempt.settle()

    def begin(
        self,
        run: Run,
        settings: LeaseSettings,
        *,
        stop: Signal | None = None,
        max_attempt_duration: float | None = None,
        batcher: TransitionBatcher | None = None,
        project: bool = True,
    ) -> OpenAttempt:
        """The attempt ``run`` is leased for, as two steps the caller awaits in turn:
        :meth:`OpenAttempt.call` (the handler) and :meth:`OpenAttempt.settle` (the
        outcome written). Options are as for :meth:`execute`."""
        return OpenAttempt(self, run, settings, stop, max_attempt_duration, batcher, project)

    async def attempt(
        self,
        run: Run,
        settings: LeaseSettings,
        *,
        stop: Signal | None = None,
        max_attempt_duration: float | None = None,
    ) -> tuple[AttemptOutcome | Ended, RetryPolicy]:
        """Call the handler of the attempt ``run`` is leased for, keeping the lease alive;
        the outcome to settle and the retry policy that applies to it."""
        assert run.lease is not None
        if run.mode is not None:
            return await self._attempt_delivery(run, settings, stop, max_attempt_duration)
        signal = Signal()
        if stop is not None:
            stop.add_callback(signal.set)
        outcome: AttemptOutcome
        # SystemExit or KeyboardInterrupt from task code: settled first, then re-raised.
        exiting: BaseException | None = None
        policy = DEFAULT_RETRY_POLICY
        try:
            task = self._tasks.get(run.task_id)
            if task is None:
                outcome = Failed(
                    RunFailure(
                        ErrorCode.TASK_NOT_FOUND.value,
                        f"Task {run.task_id!r} is not registered in this worker.",
                        retryable=True,
                    )
                )
            else:
                policy = task.retry
                time_limit = _min_or_none(task.timeout, max_attempt_duration)
                heartbeat = _Heartbeat(self._store, run, settings, signal, self._keeper)
                try:
                    prepared = _prepare(task, run, signal, heartbeat)
                    if isinstance(prepared, Failed):
                        outcome = prepared
                    elif task.is_async and time_limit is None:
                        # The common case, awaited right here: no frame or task of its own.
                        # It is call_handler's first branch, inlined on the worker's
                        # per-attempt path (bench/README.md); the rule is the same.
                        try:
                            outcome = _outcome(run, await task.fn(*prepared))
                        except Exception as error:
                            outcome = _raised(run, error)
                        except asyncio.CancelledError as error:
                            if being_cancelled():
                                raise  # a real cancellation of this attempt (a shutdown)
                            outcome = _raised(run, error)
                    else:
                        outcome = await call_handler(
                            task.fn,
                            prepared,
                            is_async=task.is_async,
                            time_limit=time_limit,
                            signal=signal,
                            threads=self._threads,
                            subject=run,
                            ends=_TASK_ENDS,
                        )
                except (SystemExit, KeyboardInterrupt) as error:
                    outcome, exiting = _raised(run, error), error
                finally:
                    renewing = heartbeat.stop()
                    if renewing is not None:
                        await _cancelled(renewing)
        finally:
            if stop is not None:
                # A long-lived worker signal must not keep one callback per past attempt.
                stop.remove_callback(signal.set)
        if signal.reason is SignalReason.SHUTDOWN and isinstance(outcome, Failed):
            # Stopped by worker shutdown, not by its own fault: try again soon, no retry spent.
            outcome = Released(0.0, "worker shutdown")
        if exiting is not None:
            # The process is about to end: settle now, so the run is not left running
            # until its lease expires, then let the exit proceed.
            try:
                await self.settle(run, outcome, policy)
            finally:
                raise exiting
        return outcome, policy

    async def _attempt_delivery(
        self,
        run: Run,
        settings: LeaseSettings,
        stop: Signal | None,
        max_attempt_duration: float | None,
    ) -> tuple[HandlerEnd, RetryPolicy]:
        """:meth:`attempt` for a delivery run: its subscription's handler with the
        message, under the same lease, signal, time limit and shutdown rules."""
        signal = Signal()
        if stop is not None:
            stop.add_callback(signal.set)
        calls = self._subscriptions
        policy = calls.policy(run)
        outcome: HandlerEnd
        exiting: BaseException | None = None
        heartbeat = _Heartbeat(self._store, run, settings, signal, self._keeper)
        try:
            try:
                prepared = await calls.prepare(run, signal, heartbeat.beat)
                if isinstance(prepared, Ended):
                    outcome = prepared
                else:
                    outcome = await call_handler(
                        prepared.fn,
                        prepared.args,
                        is_async=prepared.is_async,
                        time_limit=_min_or_none(prepared.timeout, max_attempt_duration),
                        signal=signal,
                        threads=self._threads,
                        subject=run,
                        ends=_DELIVERY_ENDS,
                    )
            except (SystemExit, KeyboardInterrupt) as error:
                outcome, exiting = Ended(error, raised=True), error
            finally:
                renewing = heartbeat.stop()
                if renewing is not None:
                    await _cancelled(renewing)
        finally:
            if stop is not None:
                stop.remove_callback(signal.set)
        if signal.reason is SignalReason.SHUTDOWN and isinstance(outcome, Ended) and outcome.raised:
            # Stopped by worker shutdown, not by its own fault: as for tasks.
            outcome = Released(0.0, "worker shutdown")
        if exiting is not None:
            try:
                await self.settle(run, outcome, policy)
            finally:
                raise exiting
        return outcome, policy

    async def settle(
        self,
        run: Run,
        outcome: AttemptOutcome | Ended,
        policy: RetryPolicy,
        batcher: TransitionBatcher | None = None,
        *,
        project: bool = True,
        report: Attempt | None = None,
    ) -> Run:
        """Write the outcome of ``run``'s attempt (through ``batcher``, by default the
        runtime's); re-read and recompute when a concurrent change won the race.

        Returns the run as settled; with ``project=False`` (the caller does not look at
        it) a written outcome returns the run as it was leased, without building a new one.
        ``report`` gets the outcome written, the delay and the settled run.
        """
        store = self._store
        settles = batcher or self._settles
        current = run
        for _ in range(MAX_SETTLE_ATTEMPTS):
            now = store.now()
            if isinstance(outcome, Ended) or current.mode is not None:
                transition = settle_delivery_attempt(
                    current,
                    outcome,  # type: ignore[arg-type]
                    policy,
                    now,
                    describe=_describe_delivery_failure,
                )
            else:
                transition = settle_attempt(current, outcome, policy, now)
            written = await settles.apply(transition)
            if written is not None:
                if report is not None:
                    _report_settled(report, outcome, transition, current, written, now)
                return project_run(current, transition, written) if project else current
            fresh = await store.storage.get_run(store.environment, run.id)
            if (
                fresh is None
                or fresh.lease is None
                or fresh.lease.token != run.lease.token  # type: ignore[union-attr]
                or fresh.status not in (RunStatus.RUNNING, RunStatus.CANCELLATION_REQUESTED)
            ):
                if report is None:
                    logger.warning(
                        "run %s: lease lost before the outcome was written; dropped", run.id
                    )
                else:
                    report.outcome = Outcome.LEASE_LOST
                    report.settled = fresh
                return fresh if fresh is not None else run
            current = fresh
        raise RunlaneError(
            ErrorCode.STORAGE_CONFLICT, f"run {run.id}: outcome kept conflicting.", retryable=True
        )


class OpenAttempt:
    """One attempt in two steps: :meth:`call` runs the handler, :meth:`settle` writes
    its outcome. Between them the caller does what must not wait for the write (a
    worker frees its slot), without handing the runner a callback.

    Observers see the attempt from :meth:`call` until :meth:`settle` returns, or until
    either step raises. Built by :meth:`AttemptRunner.begin`; each step runs once.
    """

    __slots__ = (
        "_batcher",
        "_limit",
        "_outcome",
        "_policy",
        "_project",
        "_runner",
        "_scope",
        "_settings",
        "_stop",
        "report",
    )

    def __init__(
        self,
        runner: AttemptRunner,
        run: Run,
        settings: LeaseSettings,
        stop: Signal | None,
        max_attempt_duration: float | None,
        batcher: TransitionBatcher | None,
        project: bool,
    ) -> None:
        assert run.lease is not None
        self._runner = runner
        self.report = Attempt(run, run.lease.owner)
        self._settings = settings
        self._stop = stop
        self._limit = max_attempt_duration
        self._batcher = batcher
        self._project = project
        self._scope: AbstractAsyncContextManager[None] | None = None
        self._outcome: AttemptOutcome | Ended | None = None
        self._policy = DEFAULT_RETRY_POLICY

    async def call(self) -> None:
        """Run the handler (keeping the lease alive); its outcome waits for :meth:`settle`."""
        report, runner = self.report, self._runner
        run = report.run
        observers = runner._observers
        if observers:
            observers.started(report)
            if observers.wraps_attempts:
                scope = observers.attempt(report)
                await scope.__aenter__()
                self._scope = scope
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "run %s (%s) attempt %s started",
                run.id,
                run.task_id,
                run.attempt,
                extra=_fields(report, "run.started"),
            )
        started = time.perf_counter()
        try:
            self._outcome, self._policy = await runner.attempt(
                run, self._settings, stop=self._stop, max_attempt_duration=self._limit
            )
        except BaseException:
            report.duration = time.perf_counter() - started
            await self._leave()
            raise
        report.duration = time.perf_counter() - started

    async def settle(self) -> Run:
        """Write the outcome :meth:`call` produced; the run as settled (see
        :meth:`AttemptRunner.settle` for ``project``)."""
        report, outcome = self.report, self._outcome
        assert outcome is not None, "call() first"
        _report_error(report, outcome)
        try:
            settled = await self._runner.settle(
                report.run,
                outcome,
                self._policy,
                self._batcher,
                project=self._project,
                report=report,
            )
            _log_outcome(report)
        finally:
            await self._leave()
        return settled

    def settle_soon(self, done: Callable[[Run | None, BaseException | None], None]) -> bool:
        """Hand the outcome :meth:`call` produced to the batcher without waiting for it to
        be written; whether it was handed (otherwise, nothing was done: use :meth:`settle`).

        Once its batch is written, ``done`` gets the run as settled (as :meth:`settle`
        returns it) or the error that kept the batch from being written, from the flush
        that wrote it. A run whose compare-and-set failed (a concurrent change) is
        neither: ``done(None, None)``, and :meth:`settle` re-reads it and decides.

        Only a task attempt whose end no observer awaits is handed over this way:
        deliveries, and attempts inside an observer's scope, settle with :meth:`settle`.
        """
        report, outcome, runner = self.report, self._outcome, self._runner
        assert outcome is not None, "call() first"
        run, batcher = report.run, self._batcher
        if (
            batcher is None
            or self._scope is not None
            or run.mode is not None
            or isinstance(outcome, Ended)
        ):
            return False
        _report_error(report, outcome)
        now = runner._store.now()
        transition = settle_attempt(run, outcome, self._policy, now)
        project = self._project

        def written(at: datetime | None, error: BaseException | None) -> None:
            if at is None:
                done(None, error)
                return
            _report_settled(report, outcome, transition, run, at, now)
            _log_outcome(report)
            self._tell_settled()
            done(project_run(run, transition, at) if project else run, None)

        batcher.submit(transition, written)
        return True

    async def _leave(self) -> None:
        """Let observers see the end: the attempt scope's exit, or ``settled``."""
        scope, self._scope = self._scope, None
        if scope is not None:
            await scope.__aexit__(None, None, None)  # reports settled itself; never raises
        else:
            self._tell_settled()

    def _tell_settled(self) -> None:
        """Observers hear ``settled`` (with no scope around the attempt to report it)."""
        observers = self._runner._observers
        if observers and self.report.outcome is not None:
            observers.settled(self.report)


class _LeaseKeeper:
    """One timer per (event loop, heartbeat interval) for every attempt's first renewal.

    Most attempts end long before their first heartbeat is due. Each one only
    enters and leaves an insertion-ordered dict (its due time grows with the
    order of entry, as the interval is the same), instead of arming and
    cancelling a timer of its own.
    """

    def __init__(self) -> None:
        self._due: dict[tuple[asyncio.AbstractEventLoop, float], dict[_Heartbeat, float]] = {}

    def add(self, beat: _Heartbeat, interval: float) -> dict[_Heartbeat, float]:
        """Wait ``interval`` for ``beat``; the dict it waits in (leaving it: ``pop(beat)``)."""
        loop = asyncio.get_running_loop()
        key = (loop, interval)
        due = loop.time() + interval
        waiting = self._due.get(key)
        if waiting is None:
            waiting = self._due[key] = {}
            loop.call_at(due, self._fire, key)
        waiting[beat] = due
        return waiting

    def _fire(self, key: tuple[asyncio.AbstractEventLoop, float]) -> None:
        loop = key[0]
        waiting = self._due[key]
        now = loop.time()
        while waiting:
            beat, due = next(iter(waiting.items()))
            if due > now:
                loop.call_at(due, self._fire, key)
                return
            del waiting[beat]
            beat.due()
        # Nobody is waiting: the next attempt arms a new timer.
        del self._due[key]


class _Heartbeat:
    """Renews the lease in the background and turns storage news into signals.

    The runner's :class:`_LeaseKeeper`, not a timer or task of its own, waits for
    the renewal: most attempts end before it is due.
    """

    __slots__ = (
        "_interval",
        "_keeper",
        "_run",
        "_settings",
        "_signal",
        "_stopped",
        "_store",
        "_task",
        "_waiting",
    )

    def __init__(
        self,
        store: StoreScope,
        run: Run,
        settings: LeaseSettings,
        signal: Signal,
        keeper: _LeaseKeeper,
    ) -> None:
        """Start waiting for the first renewal."""
        self._store = store
        self._run = run
        self._settings = settings
        self._signal = signal
        self._keeper = keeper
        self._interval = interval = settings.interval
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._waiting = keeper.add(self, interval)

    def _schedule(self) -> None:
        if not self._stopped:
            self._waiting = self._keeper.add(self, self._interval)

    def due(self) -> None:
        self._task = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        try:
            await self.beat()
        except RunlaneError as error:
            logger.warning("run %s: heartbeat failed: %s", self._run.id, error)
        if self._signal.reason is not SignalReason.LEASE_LOST:
            self._schedule()

    def stop(self) -> asyncio.Task[None] | None:
        """Stop renewing; a renewal in flight is cancelled and returned, to be awaited."""
        self._stopped = True
        # A heartbeat the keeper already let go of (renewing) is in no dict any more.
        self._waiting.pop(self, None)
        task = self._task
        if task is not None:
            task.cancel()
        return task

    async def beat(self) -> None:
        store, run = self._store, self._run
        assert run.lease is not None
        expires = store.now() + timedelta(seconds=self._settings.duration)
        status = await store.storage.heartbeat(
            store.environment, run.id, run.lease.token, expires, store.now()
        )
        if status is None:
            self._signal.set(SignalReason.LEASE_LOST)
        elif status is RunStatus.CANCELLATION_REQUESTED:
            self._signal.set(SignalReason.CANCELLED)


def _prepare(
    task: Any, run: Run, signal: Signal, heartbeat: _Heartbeat
) -> tuple[Any, Context] | Failed:
    """The handler's arguments (payload, context), or the failure of an invalid payload."""
    try:
        payload = payload_for_handler(task, run.payload)
    except RunlaneError as error:
        return Failed(sanitize_exception(RunlaneError(error.code, error.message, meta=error.meta)))
    lease = run.lease
    assert lease is not None
    ctx = Context(
        run_id=run.id,
        task_id=run.task_id,
        queue=run.queue,
        attempt=run.attempt,
        signal=signal,
        scheduled_for=run.source.occurs_at,
        trace_carrier=run.trace_carrier,
        heartbeat=heartbeat.beat,
        worker_id=lease.owner,
    )
    return payload, ctx


async def _cancelled(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _ended(run: Run, value: Any) -> Ended:
    return Ended(value, raised=False)


def _ended_by(run: Run, error: BaseException) -> Ended:
    return Ended(error, raised=True)


def _ended_late(run: Run, time_limit: float) -> Ended:
    timeout = RunlaneError(
        ErrorCode.TASK_TIMEOUT, _time_limit_message(run, time_limit), retryable=True
    )
    return Ended(timeout, raised=True)


#: A subscription handler's end, undigested (decide_delivery reads it when it settles).
_DELIVERY_ENDS: HandlerEnds[Run, Ended] = HandlerEnds(
    returned=_ended, raised=_ended_by, timed_out=_ended_late
)


def _describe_delivery_failure(error: BaseException) -> RunFailure:
    """A delivery handler's exception as stored: as a task's, with its traceback
    when it was raised (an error made by the runtime itself has none)."""
    failure = sanitize_exception(error)
    if error.__traceback__ is None:
        return failure
    text = format_traceback(error)
    if text is None:
        return failure
    return RunFailure(
        failure.code, failure.message, failure.retryable, {**failure.meta, "traceback": text}
    )


def _timed_out(run: Run, time_limit: float) -> Failed:
    return Failed(
        RunFailure(
            ErrorCode.TASK_TIMEOUT.value, _time_limit_message(run, time_limit), retryable=True
        )
    )


def _time_limit_message(run: Run, time_limit: float) -> str:
    return f"Task {run.task_id!r} ran longer than its {time_limit:g}s time limit."


def _raised(run: Run, error: BaseException) -> Failed:
    failure = sanitize_exception(error)
    text = format_traceback(error)
    if text is not None:
        failure = RunFailure(
            failure.code,
            failure.message,
            failure.retryable,
            {**failure.meta, "traceback": text},
        )
    return Failed(failure, error)


def format_traceback(error: BaseException, limit: int = MAX_TRACEBACK_CHARS) -> str | None:
    """``error``'s formatted traceback, cut to its last ``limit`` characters (the
    innermost frames), storable as text; ``None`` if it cannot be formatted."""
    try:
        text = "".join(traceback.format_exception(error))
    except Exception:
        return None  # task code's __str__ may raise: the failure still stores
    if len(text) > limit:
        cut = text[-limit:]
        # Start at a line boundary so the first frame kept reads whole.
        newline = cut.find("\n")
        text = "… (traceback truncated)\n" + (cut[newline + 1 :] if newline >= 0 else cut)
    return storable(text)


_LOG_EVENTS: dict[Outcome, tuple[str, int]] = {
    Outcome.SUCCEEDED: ("run.succeeded", logging.DEBUG),
    Outcome.RELEASED: ("run.released", logging.DEBUG),
    Outcome.RETRIED: ("run.retry_scheduled", logging.INFO),
    Outcome.CANCELLED: ("run.cancelled", logging.INFO),
    Outcome.FAILED: ("run.failed", logging.WARNING),
    # A delivery's dead letter is its failure: parked until an operator acts.
    Outcome.DEAD_LETTERED: ("run.dead_lettered", logging.WARNING),
    Outcome.LEASE_LOST: ("run.lease_lost", logging.WARNING),
}


#: Outcomes whose log line carries the error (type, code, traceback).
_FAILURES = (Outcome.FAILED, Outcome.RETRIED, Outcome.DEAD_LETTERED)


def _fields(report: Attempt, event: str) -> dict[str, Any]:
    run = report.run
    return {
        "event": event,
        "run_id": run.id,
        "task_id": run.task_id,
        "queue": run.queue,
        "attempt": run.attempt,
        "worker_id": report.worker_id,
    }


def _log_outcome(report: Attempt) -> None:
    """One line per attempt outcome, at the level its event has (logging.md §10)."""
    outcome = report.outcome
    if outcome is None:
        return
    event, level = _LOG_EVENTS[outcome]
    if not logger.isEnabledFor(level):
        return
    run = report.run
    extra = _fields(report, event)
    extra["outcome"] = outcome.value
    extra["duration"] = round(report.duration, 6)
    detail = ""
    failure = report.failure
    if failure is not None and outcome in _FAILURES:
        error_type = failure.meta.get("exception_type") or failure.code
        extra["error_type"] = error_type
        extra["error_code"] = failure.code
        detail = f": {error_type}: {failure.message}"
    if report.delay_seconds is not None:
        extra["delay_seconds"] = round(report.delay_seconds, 3)
    if outcome is Outcome.RELEASED and report.release_reason:
        detail = f": {report.release_reason}"
    if outcome is Outcome.DEAD_LETTERED and report.dead_letter_reason is not None:
        extra["reason"] = report.dead_letter_reason
        detail = f": {report.dead_letter_reason}" + (f";{detail[1:]}" if detail else "")
    logger.log(
        level,
        "run %s (%s) attempt %s %s in %.3fs%s",
        run.id,
        run.task_id,
        run.attempt,
        outcome.value,
        report.duration,
        detail,
        extra=extra,
        exc_info=report.error if outcome in _FAILURES else None,
    )


def _report_error(report: Attempt, outcome: AttemptOutcome | Ended) -> None:
    """What observers learn of a failed attempt before its outcome is written."""
    if type(outcome) is Failed:
        report.failure = outcome.failure
        report.error = outcome.error
    elif type(outcome) is Ended and outcome.raised:
        report.error = outcome.value  # type: ignore[assignment]


def _report_settled(
    report: Attempt,
    outcome: AttemptOutcome | Ended,
    transition: Transition,
    run: Run,
    written: datetime,
    now: datetime,
) -> None:
    changes = transition.changes
    report.outcome = OUTCOME_BY_STATUS.get(changes.status, Outcome.SUCCEEDED)
    report.settled_as(run, transition, written)
    if changes.run_at is not None and changes.status in (RunStatus.RETRYING, RunStatus.RELEASED):
        report.delay_seconds = max(0.0, (changes.run_at - now).total_seconds())
    if type(outcome) is Released:
        report.release_reason = outcome.reason
    if type(outcome) is Ended:
        report.failure = changes.failure
    if changes.status is RunStatus.DEAD_LETTERED:
        report.dead_letter_reason = changes.dead_letter_reason


def _outcome(run: Run, value: Any) -> AttemptOutcome:
    """What a handler's return value means: a release, or a JSON result."""
    if isinstance(value, Release):
        try:
            delay = parse_duration(value.delay, name="the Release delay")
            reason = storable(str(value.reason)) if value.reason is not None else None
        except Exception as error:
            # Settling would raise (a NaN or overflowing delay, a reason that cannot
            # be printed): fail this attempt instead of leaving the run leased.
            return Failed(
                RunFailure(
                    ErrorCode.TASK_FAILED.value,
                    f"Task {run.task_id!r} returned a Release that cannot be honoured: "
                    f"{error.message if isinstance(error, RunlaneError) else 'bad reason'}.",
                    retryable=False,
                )
            )
        return Released(delay, reason)
    if value is None or isinstance(value, bool | int):
        return Succeeded(value)
    if isinstance(value, str):
        problem = unstorable(value)
        return Succeeded(value) if problem is None else _unstorable(run, problem)
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return Failed(
            RunFailure(
                ErrorCode.TASK_FAILED.value,
                f"Task {run.task_id!r} returned a {type(value).__name__}, which is not JSON "
                f"(or is nested too deep to encode).",
                retryable=False,
            )
        )
    # Counting brackets is cheap and rules out deep nesting for almost every result.
    if (
        encoded.count("[") + encoded.count("{") > MAX_RESULT_DEPTH
        and _depth(value) > MAX_RESULT_DEPTH
    ):
        return _unstorable(run, f"more than {MAX_RESULT_DEPTH} levels of nesting")
    problem = unstorable_json(value, encoded)
    return Succeeded(value) if problem is None else _unstorable(run, problem)


def _depth(value: Any) -> int:
    """How deeply lists and dicts nest in ``value`` (without recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list | tuple):
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in item)
    return deepest


def _unstorable(run: Run, problem: str) -> Failed:
    # Failing only this run: stored, the result would fail the whole batch of settles.
    return Failed(
        RunFailure(
            ErrorCode.TASK_FAILED.value,
            f"Task {run.task_id!r} returned a result containing {problem}.",
            retryable=False,
        )
    )


#: What a task handler's end means for the run it was called for.
_TASK_ENDS: HandlerEnds[Run, AttemptOutcome] = HandlerEnds(
    returned=_outcome, raised=_raised, timed_out=_timed_out
)


def _min_or_none(first: float | None, second: float | None) -> float | None:
    if first is None:
        return second
    return first if second is None else min(first, second)
