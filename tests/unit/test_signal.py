"""The stop Signal a task sees, usable from async code and from threads; and Context."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from runlane import Context, ErrorCode, Release, RunlaneError, Signal, SignalReason


def test_a_new_signal_is_not_set_and_has_no_reason() -> None:
    signal = Signal()
    assert signal.is_set() is False
    assert signal.reason is None
    assert signal.wait_sync(timeout=0) is False


def test_the_first_reason_wins() -> None:
    signal = Signal()
    signal.set(SignalReason.CANCELLED)
    signal.set(SignalReason.SHUTDOWN)
    signal.set(SignalReason.TIMEOUT)
    assert signal.is_set() is True
    assert signal.reason is SignalReason.CANCELLED


async def test_wait_returns_the_reason_once_the_signal_is_set() -> None:
    signal = Signal()
    waiter = asyncio.create_task(signal.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    signal.set(SignalReason.LEASE_LOST)
    assert await asyncio.wait_for(waiter, 1) is SignalReason.LEASE_LOST


async def test_wait_on_a_set_signal_returns_at_once() -> None:
    signal = Signal()
    signal.set(SignalReason.TIMEOUT)
    assert await asyncio.wait_for(signal.wait(), 1) is SignalReason.TIMEOUT


async def test_every_waiter_is_woken() -> None:
    signal = Signal()
    waiters = [asyncio.create_task(signal.wait()) for _ in range(5)]
    await asyncio.sleep(0)
    signal.set(SignalReason.SHUTDOWN)
    assert await asyncio.wait_for(asyncio.gather(*waiters), 1) == [SignalReason.SHUTDOWN] * 5


async def test_setting_from_another_thread_wakes_an_async_waiter() -> None:
    signal = Signal()
    waiter = asyncio.create_task(signal.wait())
    await asyncio.sleep(0)
    setter = threading.Thread(target=signal.set, args=(SignalReason.CANCELLED,))
    setter.start()
    assert await asyncio.wait_for(waiter, 2) is SignalReason.CANCELLED
    setter.join()


async def test_a_sync_task_in_a_thread_sees_the_signal_set_by_the_event_loop() -> None:
    signal = Signal()
    started = threading.Event()

    def sync_task() -> bool:
        started.set()
        return signal.wait_sync(timeout=5)

    loop = asyncio.get_running_loop()
    job = loop.run_in_executor(None, sync_task)
    await loop.run_in_executor(None, started.wait, 2)
    signal.set(SignalReason.TIMEOUT)
    assert await asyncio.wait_for(job, 2) is True
    assert signal.reason is SignalReason.TIMEOUT


def test_wait_sync_gives_up_after_its_timeout() -> None:
    signal = Signal()
    started = time.monotonic()
    assert signal.wait_sync(timeout=0.05) is False
    assert time.monotonic() - started >= 0.04


def test_callbacks_run_once_with_the_first_reason() -> None:
    signal = Signal()
    seen: list[SignalReason] = []
    signal.add_callback(seen.append)
    signal.add_callback(seen.append)
    signal.set(SignalReason.SHUTDOWN)
    signal.set(SignalReason.CANCELLED)
    assert seen == [SignalReason.SHUTDOWN, SignalReason.SHUTDOWN]


def test_a_callback_added_after_the_signal_is_set_runs_at_once() -> None:
    signal = Signal()
    signal.set(SignalReason.LEASE_LOST)
    seen: list[SignalReason] = []
    signal.add_callback(seen.append)
    assert seen == [SignalReason.LEASE_LOST]


def test_signals_chain_through_callbacks() -> None:
    worker_stop, attempt = Signal(), Signal()
    worker_stop.add_callback(attempt.set)
    worker_stop.set(SignalReason.SHUTDOWN)
    assert attempt.reason is SignalReason.SHUTDOWN


def test_setting_after_the_waiting_loop_closed_does_not_raise() -> None:
    signal = Signal()

    async def wait_briefly() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(signal.wait(), 0.01)

    asyncio.run(wait_briefly())
    signal.set(SignalReason.SHUTDOWN)
    assert signal.reason is SignalReason.SHUTDOWN


def test_concurrent_setters_agree_on_one_reason() -> None:
    signal = Signal()
    seen: list[SignalReason] = []
    signal.add_callback(seen.append)
    barrier = threading.Barrier(len(SignalReason))

    def set_after_barrier(reason: SignalReason) -> None:
        barrier.wait()
        signal.set(reason)

    threads = [threading.Thread(target=set_after_barrier, args=(r,)) for r in SignalReason]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 1
    assert seen[0] is signal.reason


# -- Context ---------------------------------------------------------------------------


async def _no_heartbeat() -> None:
    return None


def _context(signal: Signal) -> Context:
    return Context(
        run_id="run-1",
        task_id="orders.record",
        queue="main",
        attempt=2,
        signal=signal,
        scheduled_for=None,
        trace_carrier=None,
        heartbeat=_no_heartbeat,
        worker_id="worker-1",
    )


def test_cancellation_is_requested_only_when_the_signal_says_cancelled() -> None:
    for reason in SignalReason:
        signal = Signal()
        ctx = _context(signal)
        assert ctx.is_cancellation_requested() is False
        signal.set(reason)
        assert ctx.is_cancellation_requested() is (reason is SignalReason.CANCELLED)


def test_release_parses_its_delay_into_a_release_value() -> None:
    ctx = _context(Signal())
    assert ctx.release("1m", reason="export not ready") == Release(60.0, "export not ready")
    assert ctx.release(0) == Release(0.0, None)


def test_a_release_with_a_bad_delay_is_a_configuration_error() -> None:
    with pytest.raises(RunlaneError) as caught:
        _context(Signal()).release("-5s")
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID


async def test_abandoned_waits_and_removed_callbacks_leave_nothing_behind() -> None:
    from runlane.model.context import Signal

    signal = Signal()
    for _ in range(50):
        waiter = asyncio.ensure_future(signal.wait())
        await asyncio.sleep(0)
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        child = Signal()
        signal.add_callback(child.set)
        signal.remove_callback(child.set)
    assert not signal._loop_events and not signal._callbacks


def test_a_callback_added_twice_is_called_twice_until_removed_once() -> None:
    calls: list[SignalReason] = []
    signal = Signal()
    signal.add_callback(calls.append)
    signal.add_callback(calls.append)
    signal.add_callback(calls.append)
    signal.remove_callback(calls.append)
    signal.set(SignalReason.SHUTDOWN)
    assert calls == [SignalReason.SHUTDOWN, SignalReason.SHUTDOWN]


def test_a_child_reads_its_parents_reason_without_a_callback_there() -> None:
    worker_stop = Signal()
    attempt = Signal.child_of(worker_stop)
    assert not attempt.is_set()
    assert not worker_stop._callbacks  # nothing waits on the child: no link
    worker_stop.set(SignalReason.SHUTDOWN)
    assert attempt.is_set() and attempt.reason is SignalReason.SHUTDOWN
    attempt.set(SignalReason.TIMEOUT)  # the parent's reason came first
    assert attempt.reason is SignalReason.SHUTDOWN


def test_a_childs_own_reason_set_first_wins_over_its_parents() -> None:
    worker_stop = Signal()
    attempt = Signal.child_of(worker_stop)
    attempt.set(SignalReason.TIMEOUT)
    worker_stop.set(SignalReason.SHUTDOWN)
    assert attempt.reason is SignalReason.TIMEOUT
    attempt.detach()
    assert attempt.reason is SignalReason.TIMEOUT


async def test_a_waiting_child_is_woken_by_its_parent_and_detaching_unlinks_it() -> None:
    worker_stop = Signal()
    attempt = Signal.child_of(worker_stop)
    waiter = asyncio.create_task(attempt.wait())
    await asyncio.sleep(0)
    assert sum(worker_stop._callbacks.values()) == 1  # linked while waited on
    worker_stop.set(SignalReason.SHUTDOWN)
    assert await asyncio.wait_for(waiter, 1) is SignalReason.SHUTDOWN

    other = Signal.child_of(Signal())
    seen: list[SignalReason] = []
    other.add_callback(seen.append)
    parent = other._parent
    assert parent is not None and sum(parent._callbacks.values()) == 1
    other.detach()
    assert not parent._callbacks and other.reason is None
    parent.set(SignalReason.SHUTDOWN)  # detached: the child no longer follows
    assert other.reason is None and seen == []


def test_a_child_waited_on_from_a_thread_is_woken_by_its_parent() -> None:
    worker_stop = Signal()
    attempt = Signal.child_of(worker_stop)
    woken: list[bool] = []
    waiting = threading.Thread(target=lambda: woken.append(attempt.wait_sync(timeout=5)))
    waiting.start()
    while not worker_stop._callbacks and waiting.is_alive():
        time.sleep(0.001)
    worker_stop.set(SignalReason.CANCELLED)
    waiting.join(5)
    assert woken == [True] and attempt.reason is SignalReason.CANCELLED


def test_detaching_keeps_the_reason_the_parent_has_by_then() -> None:
    worker_stop = Signal()
    attempt = Signal.child_of(worker_stop)
    worker_stop.set(SignalReason.SHUTDOWN)
    attempt.detach()
    assert attempt.reason is SignalReason.SHUTDOWN and attempt._parent is None
    late = Signal()
    child = Signal.child_of(late)
    seen: list[SignalReason] = []
    late.set(SignalReason.LEASE_LOST)
    child.add_callback(seen.append)  # the parent is set already: called at once
    assert seen == [SignalReason.LEASE_LOST]
