"""One attempt of one leased run: call the handler, keep the lease alive, settle.

:class:`AttemptRunner` runs attempts for a runtime; :class:`OpenAttempt` is one of
them as two steps (the handler call, then the settle), so that a worker frees its
slot between them. How the handler is called is :mod:`runlane.model.handler_calls`;
the lease is kept by :mod:`runlane.core.lease_keeping`; what a handler's end means
is :mod:`runlane.core.attempt_outcomes`; what observers and the log hear is
:mod:`runlane.core.outcome_reporting`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import Token
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runlane.core.attempt_outcomes import (
    TASK_ENDS,
    describe_delivery_failure,
    raised_failure,
    result_outcome,
)
from runlane.core.batching import (
    MAX_SETTLE_BATCH,
    ClaimHook,
    SettleCounter,
    TransitionBatcher,
)
from runlane.core.delivering import (
    DELIVERY_ENDS,
    Ended,
    HandlerEnd,
    Subscriptions,
    settle_delivery_attempt,
)
from runlane.core.lease_keeping import Heartbeat, LeaseKeeper, LeaseSettings
from runlane.core.observing import Attempt, AttemptScope, HandlerScope, Outcome
from runlane.core.outcome_reporting import (
    attempt_log_fields,
    log_outcome,
    report_error,
    report_settled,
)
from runlane.core.progress import AttemptProgress, ProgressWriter
from runlane.model.context import Context, Signal, SignalReason
from runlane.model.handler_calls import being_cancelled, call_handler
from runlane.model.payloads import payload_for_handler
from runlane.model.transitions import (
    AttemptOutcome,
    Failed,
    Released,
    sanitize_exception,
    settle_attempt,
)
from runlane.model.transitions import project as project_run
from runlane.ports.storage import TracksDependencies
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.records import (
    CreateOutcome,
    LeaseRequest,
    NewRun,
    ProgressWrite,
    QueuePolicy,
    Transition,
)
from runlane.types.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from runlane.types.runs import Run, RunFailure, RunStatus, stored_trace_carrier

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from runlane.core.observing import Observers
    from runlane.core.store import StoreScope
    from runlane.model.definitions import TaskDef

#: Attempts log under the name they always had, which the logging guide documents.
logger = logging.getLogger("runlane.execution")

#: Settles that lose a compare-and-set race are re-read and recomputed this often.
MAX_SETTLE_ATTEMPTS = 5


class AttemptRunner:
    """Runs attempts for one runtime; shared by workers, ``execute_next`` and ``run_now``."""

    def __init__(
        self,
        store: StoreScope,
        tasks: Mapping[str, TaskDef[Any]],
        observers: Observers,
        threads: Callable[[], Executor],
        subscriptions: Subscriptions,
        throughput: SettleCounter | None = None,
    ) -> None:
        """Run attempts of ``tasks`` against ``store``, seen by ``observers``; sync
        task functions run on ``threads()`` (called when one first runs, so a runtime
        that only runs async tasks never starts a pool). Delivery runs call the
        handlers of ``subscriptions``. Every settle batcher of the runner counts what
        it settles into ``throughput``."""
        self._store = store
        self._read_dependencies = DependencyReader(store).read
        self._tasks = tasks
        self._subscriptions = subscriptions
        self._observers = observers
        self._threads = threads
        self._throughput = throughput
        self._settles = self.settle_batcher()
        self._keeper = LeaseKeeper()
        self._progress = ProgressWriter(store)

    def settle_batcher(
        self,
        *,
        max_batch: int = MAX_SETTLE_BATCH,
        max_flushes: int = 1,
        claims: ClaimHook | None = None,
    ) -> TransitionBatcher:
        """A batcher for this runner's settles (a worker's own, with its options), which
        counts what it writes into the runner's throughput."""
        return TransitionBatcher(
            self._store,
            max_batch=max_batch,
            max_flushes=max_flushes,
            claims=claims,
            counter=self._throughput,
        )

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
    ) -> tuple[AttemptOutcome | Ended, RetryPolicy, ProgressWrite | None]:
        """Call the handler of the attempt ``run`` is leased for, keeping the lease alive;
        the outcome to settle, the retry policy that applies to it, and the progress it
        reported last that is not stored yet (the settle stores it)."""
        assert run.lease is not None
        if run.mode is not None:
            return await self._attempt_delivery(run, settings, stop, max_attempt_duration)
        # Follows the worker's stop signal without a callback there, unless waited on.
        signal = Signal() if stop is None else Signal.child_of(stop)
        outcome: AttemptOutcome
        # SystemExit or KeyboardInterrupt from task code: settled first, then re-raised.
        exiting: BaseException | None = None
        policy = DEFAULT_RETRY_POLICY
        unwritten: ProgressWrite | None = None
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
                heartbeat = Heartbeat(self._store, run, settings, signal, self._keeper)
                progress = AttemptProgress(self._progress, run)
                try:
                    prepared = _prepare(
                        task, run, signal, heartbeat, progress, self._read_dependencies
                    )
                    if isinstance(prepared, Failed):
                        outcome = prepared
                    elif task.is_async and time_limit is None:
                        # The common case, awaited right here: no frame or task of its own.
                        # It is call_handler's first branch, inlined on the worker's
                        # per-attempt path (bench/README.md); the rule is the same.
                        try:
                            outcome = result_outcome(run, await task.fn(*prepared))
                        except Exception as error:
                            outcome = raised_failure(run, error)
                        except asyncio.CancelledError as error:
                            if being_cancelled():
                                raise  # a real cancellation of this attempt (a shutdown)
                            outcome = raised_failure(run, error)
                    else:
                        outcome = await call_handler(
                            task.fn,
                            prepared,
                            is_async=task.is_async,
                            time_limit=time_limit,
                            signal=signal,
                            threads=self._threads,
                            subject=run,
                            ends=TASK_ENDS,
                        )
                except (SystemExit, KeyboardInterrupt) as error:
                    outcome, exiting = raised_failure(run, error), error
                finally:
                    renewing = heartbeat.stop()
                    if renewing is not None:
                        await _cancelled(renewing)
                    if progress.latest is not None:
                        # The last report goes with the outcome, in its transaction. An
                        # attempt that handed none to the writer (most: they end within
                        # an interval) has no write to wait for, so no coroutine.
                        unwritten = (
                            progress.last() if progress.handed is None else await progress.end()
                        )
        finally:
            # A long-lived worker signal must not keep one callback per past attempt.
            signal.detach()
        if signal.reason is SignalReason.SHUTDOWN and isinstance(outcome, Failed):
            # Stopped by worker shutdown, not by its own fault: try again soon, no retry spent.
            outcome = Released(0.0, "worker shutdown")
        if exiting is not None:
            # The process is about to end: settle now, so the run is not left running
            # until its lease expires, then let the exit proceed.
            try:
                await self.settle(run, outcome, policy, progress=unwritten)
            finally:
                raise exiting
        return outcome, policy, unwritten

    async def _attempt_delivery(
        self,
        run: Run,
        settings: LeaseSettings,
        stop: Signal | None,
        max_attempt_duration: float | None,
    ) -> tuple[HandlerEnd, RetryPolicy, None]:
        """:meth:`attempt` for a delivery run: its subscription's handler with the
        message, under the same lease, signal, time limit and shutdown rules (its
        handler reports no progress)."""
        signal = Signal() if stop is None else Signal.child_of(stop)
        calls = self._subscriptions
        policy = calls.policy(run)
        outcome: HandlerEnd
        exiting: BaseException | None = None
        heartbeat = Heartbeat(self._store, run, settings, signal, self._keeper)
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
                        ends=DELIVERY_ENDS,
                    )
            except (SystemExit, KeyboardInterrupt) as error:
                outcome, exiting = Ended(error, raised=True), error
            finally:
                renewing = heartbeat.stop()
                if renewing is not None:
                    await _cancelled(renewing)
        finally:
            signal.detach()
        if signal.reason is SignalReason.SHUTDOWN and isinstance(outcome, Ended) and outcome.raised:
            # Stopped by worker shutdown, not by its own fault: as for tasks.
            outcome = Released(0.0, "worker shutdown")
        if exiting is not None:
            try:
                await self.settle(run, outcome, policy)
            finally:
                raise exiting
        return outcome, policy, None

    async def settle(
        self,
        run: Run,
        outcome: AttemptOutcome | Ended,
        policy: RetryPolicy,
        batcher: TransitionBatcher | None = None,
        *,
        project: bool = True,
        report: Attempt | None = None,
        progress: ProgressWrite | None = None,
        started: bool = True,
    ) -> Run:
        """Write the outcome of ``run``'s attempt (through ``batcher``, by default the
        runtime's); re-read and recompute when a concurrent change won the race.

        Returns the run as settled; with ``project=False`` (the caller does not look at
        it) a written outcome returns the run as it was leased, without building a new one.
        ``report`` gets the outcome written, the delay and the settled run. ``progress``
        (the attempt's last report, not stored yet) is written with the outcome. A run
        whose attempt never ``started`` (a claimed run given back) counts in no
        throughput.
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
                    describe=describe_delivery_failure,
                )
            else:
                transition = settle_attempt(current, outcome, policy, now, progress=progress)
            written = await settles.apply(transition, run if started else None)
            if written is not None:
                if report is not None:
                    report_settled(report, outcome, transition, current, written, now)
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


#: Told by an :class:`OpenAttempt` handed to the batch with
#: :meth:`~OpenAttempt.settle_soon` how its write went: the attempt, the run as settled
#: (``None``: not written), and the error that kept its batch from being written.
SettledSoon = Callable[["OpenAttempt", Run | None, BaseException | None], None]


class OpenAttempt:
    """One attempt in two steps: :meth:`call` runs the handler, :meth:`settle` writes
    its outcome. Between them the caller does what must not wait for the write (a
    worker frees its slot), without handing the runner a callback.

    Observers' async attempt contexts see the attempt from :meth:`call` until
    :meth:`settle` returns, or until either step raises; plain (sync) ones see the
    handler call only, inside :meth:`call`. Built by :meth:`AttemptRunner.begin`;
    each step runs once.
    """

    __slots__ = (
        "_batcher",
        "_done",
        "_handled",
        "_limit",
        "_outcome",
        "_policy",
        "_progress",
        "_project",
        "_runner",
        "_scope",
        "_settings",
        "_settling_at",
        "_stop",
        "_transition",
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
        #: What is left once the outcome is written: the observers' AttemptScope, or
        #: the sole observer's own async context.
        self._scope: AttemptScope | contextlib.AbstractAsyncContextManager[None] | None = None
        #: Plain contexts left when the handler returned that wait to hear the end.
        self._handled: HandlerScope | None = None
        self._outcome: AttemptOutcome | Ended | None = None
        self._policy = DEFAULT_RETRY_POLICY
        self._progress: ProgressWrite | None = None
        #: Set by settle_soon: what __call__ tells once the batch is written.
        self._done: SettledSoon | None = None
        self._transition: Transition | None = None
        self._settling_at: datetime | None = None

    async def call(self) -> None:
        """Run the handler (keeping the lease alive); its outcome waits for :meth:`settle`."""
        report, runner = self.report, self._runner
        run = report.run
        observers = runner._observers
        handling: HandlerScope | None = None
        token: Token[Any] | None = None
        if observers.hears_started:
            observers.started(report)
        if observers.wraps_attempts:
            hook = observers.sole_attempt
            if hook is None:
                scope: Any = observers.attempt(report)
            else:
                # The usual case (one tracing observer), called here: a Python call less.
                try:
                    scope = hook(report)
                except Exception:
                    observers.sole_attempt_failed()
                    scope = None
                if scope is not None and type(scope) is not Token:
                    if hasattr(scope, "__aenter__"):
                        # Entered and left here, not through an AttemptScope: two
                        # coroutines less per attempt (see _leave).
                        try:
                            await scope.__aenter__()
                        except Exception:
                            observers.sole_attempt_failed()
                        else:
                            self._scope = scope
                        scope = None
                    else:
                        scope = observers.sole_scope(scope)
            if type(scope) is Token:
                # A context variable the observer set: reset once the handler returns.
                token = scope
            elif isinstance(scope, HandlerScope):
                # Around the handler only: the outcome settles as without observers.
                handling = scope
                if handling.enter():
                    self._handled = handling
            elif scope is not None:
                await scope.__aenter__()
                self._scope = scope
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "run %s (%s) attempt %s started",
                run.id,
                run.task_id,
                run.attempt,
                extra=attempt_log_fields(report, "run.started"),
            )
        started = time.perf_counter()
        try:
            try:
                self._outcome, self._policy, self._progress = await runner.attempt(
                    run, self._settings, stop=self._stop, max_attempt_duration=self._limit
                )
            finally:
                if handling is not None:
                    handling.leave()
                elif token is not None:
                    try:
                        token.var.reset(token)
                    except (ValueError, RuntimeError):  # not this context's, or used
                        observers.sole_attempt_failed()
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
        report_error(report, outcome)
        try:
            settled = await self._runner.settle(
                report.run,
                outcome,
                self._policy,
                self._batcher,
                project=self._project,
                report=report,
                progress=self._progress,
            )
            log_outcome(report)
        finally:
            await self._leave()
        return settled

    def settle_soon(self, done: SettledSoon) -> bool:
        """Hand the outcome :meth:`call` produced to the batcher without waiting for it to
        be written; whether it was handed (otherwise, nothing was done: use :meth:`settle`).

        Once its batch is written, ``done`` gets this attempt and the run as settled (as
        :meth:`settle` returns it) or the error that kept the batch from being written,
        from the flush that wrote it. A run whose compare-and-set failed (a concurrent
        change) is neither: ``done(attempt, None, None)``, and :meth:`settle` re-reads it
        and decides.

        Only a task attempt whose end no observer awaits is handed over this way:
        deliveries, and attempts inside an observer's async scope, settle with
        :meth:`settle` (a plain context around the handler is already left).
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
        try:
            report_error(report, outcome)
            self._settling_at = now = runner._store.now()
            self._transition = transition = settle_attempt(
                run, outcome, self._policy, now, progress=self._progress
            )
            self._done = done
            # The attempt itself is the batch's callback: what the write needs to be told
            # is in its slots, not in a closure and a partial per attempt kept alive until
            # the batch is written (they were most of what the collector promoted).
            batcher.submit(transition, run, self)
        except BaseException:
            self._end_handled()  # nothing will be written: the attempt is over
            raise
        return True

    def __call__(self, at: datetime | None, error: BaseException | None) -> None:
        """The batch that held the outcome handed by :meth:`settle_soon` was written
        (at ``at``; ``None``: its compare-and-set failed) or failed with ``error``."""
        done = self._done
        assert done is not None, "settle_soon() first"
        if at is None:
            if error is not None:  # not written: a compare-and-set failure settles later
                self._end_handled()
            done(self, None, error)
            return
        report, transition, now = self.report, self._transition, self._settling_at
        run = report.run
        assert transition is not None and self._outcome is not None and now is not None
        report_settled(report, self._outcome, transition, run, at, now)
        log_outcome(report)
        self._tell_settled()
        if self._handled is not None:
            self._end_handled()
        done(self, project_run(run, transition, at) if self._project else run, None)

    async def _leave(self) -> None:
        """Let observers see the end: the attempt scope's exit, or ``settled``."""
        scope, self._scope = self._scope, None
        if type(scope) is AttemptScope:
            await scope.__aexit__(None, None, None)  # reports settled itself; never raises
            return
        self._tell_settled()
        if self._handled is not None:
            self._end_handled()
        if scope is not None:
            # The sole observer's own async context, left as an AttemptScope leaves it.
            try:
                await scope.__aexit__(None, None, None)
            except Exception:
                self._runner._observers.sole_attempt_failed()

    def _end_handled(self) -> None:
        """The plain contexts waiting for the end hear it (once)."""
        handled, self._handled = self._handled, None
        if handled is not None:
            handled.end()

    def _tell_settled(self) -> None:
        """Observers hear ``settled`` (with no scope around the attempt to report it)."""
        observers = self._runner._observers
        if observers.hears_settled and self.report.outcome is not None:
            observers.settled(self.report)


def _prepare(
    task: Any,
    run: Run,
    signal: Signal,
    heartbeat: Heartbeat,
    progress: AttemptProgress,
    dependencies: Callable[[str], Awaitable[list[Run]]],
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
        trace_carrier=stored_trace_carrier(run),  # decoded if the task reads it
        heartbeat=heartbeat.beat,
        worker_id=lease.owner,
        progress=progress,
        dependencies=dependencies,
    )
    return payload, ctx


async def _cancelled(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _min_or_none(first: float | None, second: float | None) -> float | None:
    if first is None:
        return second
    return first if second is None else min(first, second)


class DependencyReader:
    """``ctx.dependencies()``: a run's dependencies as storage holds them now."""

    __slots__ = ("_store",)

    def __init__(self, store: StoreScope) -> None:
        self._store = store

    async def read(self, run_id: str) -> list[Run]:
        """The dependencies of ``run_id`` in the order given (none on a storage
        without dependencies)."""
        storage = self._store.storage
        if not isinstance(storage, TracksDependencies):
            return []
        return await storage.list_dependencies(self._store.environment, run_id)
