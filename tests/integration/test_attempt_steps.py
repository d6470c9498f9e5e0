"""A worker runs each attempt in two steps, handler then settle, and frees its slot
between them; observers see one scope around both steps, even when a step fails, or,
with a plain (sync) context, one around the handler only."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from runlane import Context, Observer, Runlane, WorkerMode, queue, sqlite_lane, task
from runlane.core.lease_keeping import LeaseSettings
from runlane.core.observing import Attempt

MAIN = queue("main", default=True)


@task("steps.ok")
async def ok(payload: Any, ctx: Context) -> None:
    return None


#: Set by ``waits`` once its handler runs; each test that uses it puts a fresh one here.
handler_running: asyncio.Event | None = None


@task("steps.waits")
async def waits(payload: Any, ctx: Context) -> None:
    assert handler_running is not None
    handler_running.set()
    await asyncio.sleep(30)


class Recorder(Observer):
    """Records in ``events`` the busy slots and the outcomes it hears."""

    def __init__(self, events: list[str] | None = None) -> None:
        self.events: list[str] = [] if events is None else events

    def slots(self, busy: int, total: int) -> None:
        self.events.append(f"slots {busy}")

    def settled(self, attempt: Attempt) -> None:
        self.events.append(f"settled {attempt.outcome.value if attempt.outcome else None}")


class Sequence(Recorder):
    """Records the order in which the hooks of one worker's attempts fire."""

    def started(self, attempt: Attempt) -> None:
        self.events.append("started")

    @contextlib.asynccontextmanager
    async def attempt(self, attempt: Attempt) -> AsyncIterator[None]:
        self.events.append("enter")
        try:
            yield
        finally:
            self.events.append("exit")


def _runtime(path: Path, observer: Observer) -> Runlane:
    return Runlane(
        lane=sqlite_lane(path),
        queues=[MAIN],
        tasks=[ok, waits],
        environment="steps",
        observers=[observer],
    )


async def test_the_slot_frees_after_the_handler_and_before_the_settle(tmp_path: Path) -> None:
    seen = Sequence()
    rl = _runtime(tmp_path / "steps.db", seen)
    await rl.migrate()
    async with rl:
        await rl.trigger(ok, {})
        await rl.worker(concurrency=1, mode=WorkerMode.DRAIN, handle_signals=False).run()
    # From the attempt's start (the worker reports its idle slots before it).
    attempt = seen.events[seen.events.index("started") :]
    assert [event for event in attempt if event != "slots 1"] == [
        "started",
        "enter",
        "slots 0",
        "settled succeeded",
        "exit",
    ]


async def test_a_step_that_raises_still_closes_the_observers_scope(tmp_path: Path) -> None:
    seen = Sequence()
    rl = _runtime(tmp_path / "raises.db", seen)
    await rl.migrate()
    async with rl:
        owner = "steps-test"
        runner = rl._attempts
        settings = LeaseSettings()
        await rl.trigger(waits, {})
        claimed = await rl.storage.claim_due_runs(
            "steps",
            rl.registry.queue_policies,
            1,
            runner.lease_request(owner, settings),
            rl.clock.now(),
        )
        (run,) = claimed

        # The handler step cancelled (a shutdown): the scope is left, nothing settled.
        cancelled = runner.begin(run, settings)
        global handler_running
        handler_running = running = asyncio.Event()
        call = asyncio.create_task(cancelled.call())
        await asyncio.wait_for(running.wait(), 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert seen.events == ["started", "enter", "exit"]

        # A run executed in full: one more scope, entered and left once.
        seen.events.clear()
        await rl.trigger(ok, {})
        settled = await rl.execute_next()
        assert settled is not None and settled.status.value == "succeeded"
        assert seen.events == ["started", "enter", "settled succeeded", "exit"]


#: The value task code saw for ``AROUND_HANDLER``, by run id.
SEEN_INSIDE: dict[str, str | None] = {}
AROUND_HANDLER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "around_handler", default=None
)


@task("steps.reads")
async def reads(payload: Any, ctx: Context) -> None:
    SEEN_INSIDE[ctx.run_id] = AROUND_HANDLER.get()


class AroundHandler(Recorder):
    """A plain (sync) attempt context: it sets a context variable for the handler only."""

    def __init__(self, events: list[str], name: str = "plain", fail: str = "") -> None:
        super().__init__(events)
        self.name = name
        self.fail = fail

    @contextlib.contextmanager
    def attempt(self, attempt: Attempt) -> Iterator[None]:
        self.events.append(f"enter {self.name}")
        if self.fail == "enter":
            raise RuntimeError("observer enter fails")
        token = AROUND_HANDLER.set(f"{self.name} {attempt.run.id}")
        try:
            yield
        finally:
            AROUND_HANDLER.reset(token)
            self.events.append(f"exit {self.name}")
            if self.fail == "exit":
                raise RuntimeError("observer exit fails")


def _reads_runtime(path: Path, *observers: Observer) -> Runlane:
    return Runlane(
        lane=sqlite_lane(path),
        queues=[MAIN],
        tasks=[reads],
        environment="steps",
        observers=observers,
    )


async def test_a_plain_attempt_context_wraps_the_handler_only_and_the_batch_settles_it(
    tmp_path: Path,
) -> None:
    """A sync context is left as soon as the handler returns, before the slot frees, and
    the outcome is written as without observers (settled heard from the batch); task
    code saw what it set, and the worker's own context is left as it was."""
    events: list[str] = []
    async with _reads_runtime(tmp_path / "plain.db", AroundHandler(events)) as rl:
        await rl.migrate()
        run = await rl.trigger(reads, {})
        worker = rl.worker(concurrency=1, mode=WorkerMode.DRAIN, handle_signals=False)
        await worker.run()
        assert worker.executed == 1
    assert SEEN_INSIDE[run.id] == f"plain {run.id}"
    assert AROUND_HANDLER.get() is None
    attempt = events[events.index("enter plain") :]
    assert [event for event in attempt if event != "slots 1"] == [
        "enter plain",
        "exit plain",
        "slots 0",
        "settled succeeded",
    ]


@pytest.mark.parametrize("fail", ["enter", "exit"])
async def test_a_plain_attempt_context_that_raises_is_logged_and_the_attempt_goes_on(
    tmp_path: Path, fail: str, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[str] = []
    observers = (AroundHandler(events, "failing", fail), AroundHandler(events, "other"))
    async with _reads_runtime(tmp_path / "fails.db", *observers) as rl:
        await rl.migrate()
        run = await rl.trigger(reads, {})
        settled = await rl.execute_next()
    assert settled is not None and settled.status.value == "succeeded"
    # The other observer's context, entered last, is the innermost either way.
    assert SEEN_INSIDE[run.id] == f"other {run.id}"
    assert "observer AroundHandler raised in attempt" in caplog.text
    # Entered in order, left in reverse; one that failed to enter is not left.
    expected = ["enter failing", "enter other", "exit other"]
    if fail == "exit":
        expected.append("exit failing")
    # Both observers hear the outcome, after the handler's contexts are left.
    assert events == [*expected, "settled succeeded", "settled succeeded"]


async def test_with_an_async_attempt_context_beside_it_a_plain_one_is_held_to_the_settle(
    tmp_path: Path,
) -> None:
    """One observer's async context keeps the attempt open until its outcome is written;
    the plain context of another is entered and left with it, in order."""
    events: list[str] = []
    sequence = Sequence(events)
    async with _reads_runtime(tmp_path / "mixed.db", AroundHandler(events), sequence) as rl:
        await rl.migrate()
        run = await rl.trigger(reads, {})
        settled = await rl.execute_next()
    assert settled is not None and settled.status.value == "succeeded"
    assert SEEN_INSIDE[run.id] == f"plain {run.id}"
    assert [event for event in events if not event.startswith("settled")] == [
        "started",
        "enter plain",
        "enter",
        "exit",
        "exit plain",
    ]


class SetsForHandler(Recorder):
    """The cheapest attempt context: a context variable set in ``attempt`` itself, its
    token returned for the runtime to reset."""

    def attempt(self, attempt: Attempt) -> contextvars.Token[str | None]:
        self.events.append("set")
        return AROUND_HANDLER.set(f"token {attempt.run.id}")


async def test_an_attempt_token_is_reset_when_the_handler_returns_and_the_batch_settles(
    tmp_path: Path,
) -> None:
    """A token from ``attempt`` is reset as a plain context is left: task code saw the
    value, the worker's context is as it was, and the outcome is written in the batch."""
    events: list[str] = []
    async with _reads_runtime(tmp_path / "token.db", SetsForHandler(events)) as rl:
        await rl.migrate()
        run = await rl.trigger(reads, {})
        worker = rl.worker(concurrency=1, mode=WorkerMode.DRAIN, handle_signals=False)
        await worker.run()
        assert worker.executed == 1
        assert AROUND_HANDLER.get() is None
        # execute_next runs the attempt in this very task: the token is reset in it.
        again = await rl.trigger(reads, {})
        assert (await rl.execute_next()) is not None
        assert AROUND_HANDLER.get() is None
    assert SEEN_INSIDE[run.id] == f"token {run.id}"
    assert SEEN_INSIDE[again.id] == f"token {again.id}"
    attempt = events[events.index("set") :]
    assert [event for event in attempt if event != "slots 1"][:3] == [
        "set",
        "slots 0",
        "settled succeeded",
    ]


@pytest.mark.parametrize("async_beside", [False, True], ids=["plain", "async"])
async def test_an_attempt_token_beside_other_contexts_is_reset_in_their_order(
    tmp_path: Path, async_beside: bool
) -> None:
    """Beside another observer's context, a token is held as a plain context is (to the
    settle when an async context is there too) and reset in reverse order of entry."""
    events: list[str] = []
    other = Sequence(events) if async_beside else AroundHandler(events, "other")
    seen_after: list[str | None] = []

    class Checks(Observer):
        def settled(self, attempt: Attempt) -> None:
            seen_after.append(AROUND_HANDLER.get())

    observers = (SetsForHandler(events), other, Checks())
    async with _reads_runtime(tmp_path / "beside.db", *observers) as rl:
        await rl.migrate()
        run = await rl.trigger(reads, {})
        settled = await rl.execute_next()
        assert AROUND_HANDLER.get() is None
    assert settled is not None and settled.status.value == "succeeded"
    if async_beside:
        # Held to the settle: still set when the outcome is reported.
        assert SEEN_INSIDE[run.id] == f"token {run.id}"
        assert seen_after == [f"token {run.id}"]
    else:
        # The plain context, entered after the token was set, is the innermost.
        assert SEEN_INSIDE[run.id] == f"other {run.id}"
        assert seen_after == [None]


async def test_an_attempt_token_that_cannot_be_reset_is_logged_and_the_attempt_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An observer's own mistake (a token it already used) fails nothing."""

    class UsedToken(Observer):
        def attempt(self, attempt: Attempt) -> contextvars.Token[str | None]:
            token = AROUND_HANDLER.set("used")
            AROUND_HANDLER.reset(token)
            return token

    async with _reads_runtime(tmp_path / "used.db", UsedToken()) as rl:
        await rl.migrate()
        run = await rl.trigger(reads, {})
        settled = await rl.execute_next()
    assert settled is not None and settled.status.value == "succeeded"
    assert SEEN_INSIDE[run.id] is None
    assert "observer UsedToken raised in attempt" in caplog.text


async def test_the_only_attempt_observer_that_raises_is_logged_once_and_attempts_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The one observer wrapping attempts is called by the attempt itself, isolated as
    every hook is: its error is logged once and the attempts run without a scope."""

    class Raising(Recorder):
        def attempt(self, attempt: Attempt) -> None:
            raise RuntimeError("attempt hook fails")

    events: list[str] = []
    async with _reads_runtime(tmp_path / "raising.db", Raising(events)) as rl:
        await rl.migrate()
        for _ in range(2):
            run = await rl.trigger(reads, {})
            settled = await rl.execute_next()
            assert settled is not None and settled.status.value == "succeeded"
            assert SEEN_INSIDE[run.id] is None
    assert caplog.text.count("observer Raising raised in attempt") == 1
    assert events == ["settled succeeded", "settled succeeded"]


@pytest.mark.parametrize("fail", ["enter", "exit"])
async def test_the_only_async_attempt_context_that_raises_is_logged_and_the_attempt_goes_on(
    tmp_path: Path, fail: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The one observer's async context, entered and left by the attempt itself, is
    isolated as every hook is: its error is logged once, the attempts settle, and the
    outcome is heard before the context is left."""

    class FailingScope(Recorder):
        @contextlib.asynccontextmanager
        async def attempt(self, attempt: Attempt) -> AsyncIterator[None]:
            self.events.append("enter")
            if fail == "enter":
                raise RuntimeError("enter fails")
            yield
            self.events.append("exit")
            raise RuntimeError("exit fails")

    events: list[str] = []
    async with _reads_runtime(tmp_path / "failing.db", FailingScope(events)) as rl:
        await rl.migrate()
        for _ in range(2):
            await rl.trigger(reads, {})
            settled = await rl.execute_next()
            assert settled is not None and settled.status.value == "succeeded"
    assert caplog.text.count("observer FailingScope raised in attempt") == 1
    one = (
        ["enter", "settled succeeded"]
        if fail == "enter"
        else ["enter", "settled succeeded", "exit"]
    )
    assert events == one * 2


class EndsAfter(Recorder):
    """A plain attempt context (a class, not a generator) that also hears the end of
    the attempt through ``attempt_ended``, as a tracer ending its span does."""

    def __init__(self, events: list[str], name: str, fail: str = "") -> None:
        super().__init__(events)
        self.name = name
        self.fail = fail

    def attempt(self, attempt: Attempt) -> contextlib.AbstractContextManager[None]:
        observer = self

        class Scope:
            def __enter__(self) -> None:
                observer.events.append(f"enter {observer.name}")

            def __exit__(self, *exc: object) -> None:
                observer.events.append(f"exit {observer.name}")
                if observer.fail == "exit":
                    raise RuntimeError("observer exit fails")

            def attempt_ended(self) -> None:
                outcome = attempt.outcome.value if attempt.outcome else None
                observer.events.append(f"ended {observer.name} {outcome}")
                if observer.fail == "ended":
                    raise RuntimeError("observer attempt_ended fails")

        return Scope()


@pytest.mark.parametrize("beside", ["plain", "async"])
async def test_each_plain_context_hears_the_attempt_end_once_beside_others(
    tmp_path: Path, beside: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With several observers, each plain context that has ``attempt_ended`` hears the
    end once, after ``settled``, whether the contexts wrap the handler only or are held
    to the settle beside an async one; one that raises there, or whose exit raised, is
    logged and fails nothing."""
    events: list[str] = []
    other = Sequence(events) if beside == "async" else AroundHandler(events, "other")
    observers = (
        EndsAfter(events, "first", fail="ended"),
        other,
        EndsAfter(events, "last", fail="exit"),
    )
    async with _reads_runtime(tmp_path / f"ends-{beside}.db", *observers) as rl:
        await rl.migrate()
        await rl.trigger(reads, {})
        settled = await rl.execute_next()
    assert settled is not None and settled.status.value == "succeeded"
    ended = [event for event in events if event.startswith("ended")]
    assert sorted(ended) == ["ended first succeeded", "ended last succeeded"]
    # Each hears the end after the outcome is reported, and after its own exit.
    last_settled = max(i for i, event in enumerate(events) if event.startswith("settled"))
    for name in ("first", "last"):
        assert events.index(f"ended {name} succeeded") > events.index(f"exit {name}")
        assert events.index(f"ended {name} succeeded") > last_settled
    assert "observer EndsAfter raised in attempt" in caplog.text
