"""What operators do to deliveries: replay and discard dead letters, list them, and the
``rl.runs`` calls that refuse deliveries.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from runlane import (
    DeliveryContext,
    ErrorCode,
    ManualClock,
    Message,
    Outcome,
    RunStatus,
    SubscriptionMode,
    task,
    topic,
)
from runlane.testing.conformance.storage.support import MAIN, OTHER, Factory
from runlane.testing.conformance.topics.support import (
    ONE_ATTEMPT,
    drain_now,
    one_dead_letter,
    orders_topic,
    refused_with,
    runtime_for,
    status_of,
    subscribe,
)


async def test_replay_and_discard_are_audited_in_the_run_history(make_runtime: Factory) -> None:
    rl, run_id = await one_dead_letter(make_runtime)
    await rl.dead_letters.replay(run_id, reason="retry after fix", actor="alice")
    await drain_now(rl)
    await rl.dead_letters.discard(run_id, reason="gave up", actor="bob")
    events = await rl.runs.events(run_id)
    replayed = [e for e in events if e.type.value == "run.replayed"]
    discarded = [e for e in events if e.type.value == "run.discarded"]
    assert [e.data for e in replayed] == [
        {"reason": "retry after fix", "actor": "alice", "replays": 1}
    ]
    assert [e.data for e in discarded] == [{"reason": "gave up", "actor": "bob"}]
    run = await rl.runs.get(run_id)
    assert run.status is RunStatus.DISCARDED and run.replays == 1 and run.attempt == 2


async def test_replay_and_discard_are_compare_and_set(make_runtime: Factory) -> None:
    rl, run_id = await one_dead_letter(make_runtime)
    await rl.dead_letters.discard(run_id, reason="first")
    for call in (
        rl.dead_letters.replay(run_id),
        rl.dead_letters.discard(run_id, reason="second"),
    ):
        error = await refused_with(call, ErrorCode.INVALID_STATE)
        assert error.meta["status"] == "discarded"
    await refused_with(rl.dead_letters.get(run_id), ErrorCode.DEAD_LETTER_NOT_FOUND)


async def test_dead_letters_page_and_filter(make_runtime: Factory) -> None:
    orders = orders_topic()
    other = topic("other-topic")

    async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        return Outcome.dead_letter("refused")

    subs = [
        subscribe("a", refuse, orders, mode=SubscriptionMode.EXCLUSIVE, key="customer"),
        subscribe("b", refuse, other),
    ]
    clock = ManualClock()
    rl = await runtime_for(make_runtime, subs, clock=clock)
    for i in range(5):
        await rl.publish(orders, {"order_id": i}, attributes={"customer": f"c{i % 2}"})
        await rl.publish(other, {"order_id": i})
        await drain_now(rl)
        clock.advance("1s")
    ids: list[str] = []
    cursor = None
    while True:
        page = await rl.dead_letters.list(limit=3, cursor=cursor)
        ids += [letter.id for letter in page.data]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(ids) == len(set(ids)) == 10
    by_time = [letter.dead_lettered_at for letter in (await rl.dead_letters.list()).data]
    assert by_time == sorted(by_time)
    assert len((await rl.dead_letters.list(topic=orders)).data) == 5
    assert len((await rl.dead_letters.list(subscription="b")).data) == 5
    assert len((await rl.dead_letters.list(subscription="a", key="c0")).data) == 3
    assert (await rl.dead_letters.list(topic="orders", subscription="b")).data == []


async def test_a_dead_letter_id_names_a_delivery_of_the_given_subscription(
    make_runtime: Factory,
) -> None:
    # 5.8: subscription= must be the delivery's; a task run is never a dead letter.
    orders = orders_topic()

    async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        return Outcome.dead_letter("refused")

    @task("conformance.ping", retry=ONE_ATTEMPT)
    async def ping(payload: Any, ctx: Any) -> None:
        raise RuntimeError("a task run that fails is not a dead letter")

    clock = ManualClock()
    rl = await make_runtime(
        [ping],
        queues=(MAIN, OTHER),
        clock=clock,
        topics=[orders],
        subscriptions=[subscribe("a", refuse, orders), subscribe("b", refuse, orders)],
    )
    receipt = await rl.publish(orders, {"order_id": 1})
    (a_id,) = [run.id for run in receipt.runs if run.task_id == "a"]
    task_run = await rl.trigger(ping, None)
    await drain_now(rl)
    letters = rl.dead_letters
    for call in (
        letters.get(a_id, subscription="b"),
        letters.replay(a_id, subscription="b"),
        letters.discard(a_id, reason="x", subscription="b"),
        letters.get(task_run.id),
        letters.replay(task_run.id),
        letters.discard(task_run.id, reason="x"),
    ):
        await refused_with(call, ErrorCode.DEAD_LETTER_NOT_FOUND)
    assert (await letters.get(a_id, subscription="a")).subscription == "a"
    clock.advance("5s")
    replayed = await letters.replay(a_id, subscription="a", reason=None)
    assert replayed is not None  # a stored dead letter's replay answers its run
    assert replayed.status is RunStatus.QUEUED and replayed.replays == 1
    assert replayed.run_at == clock.now()
    assert (await rl.runs.get(task_run.id)).status is RunStatus.FAILED
    bad_reason: Any = 5
    error = await refused_with(
        letters.replay(a_id, reason=bad_reason), ErrorCode.CONFIGURATION_INVALID
    )
    assert "optional" in error.message


async def test_runs_operations_refuse_what_does_not_apply_to_deliveries(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()

    async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        return Outcome.dead_letter("refused")

    sub = subscribe("s", refuse, orders)
    rl = await runtime_for(make_runtime, [sub])
    receipt = await rl.publish(orders, {"order_id": 1})
    run_id = receipt.runs[0].id
    await refused_with(rl.runs.retry(run_id), ErrorCode.INVALID_STATE)
    await drain_now(rl)
    for call in (rl.runs.cancel(run_id), rl.runs.retry(run_id), rl.runs.rerun(run_id)):
        error = await refused_with(call, ErrorCode.INVALID_STATE)
        assert "rl.dead_letters" in error.message
    producing: list[Awaitable[Any]] = [
        rl.trigger("s"),
        rl.trigger_many("s", [None]),
        rl.run_now("s"),
    ]
    for produce in producing:
        await refused_with(produce, ErrorCode.TASK_NOT_FOUND)
    assert await status_of(rl, run_id) is RunStatus.DEAD_LETTERED


async def test_operator_calls_check_their_arguments_first(make_runtime: Factory) -> None:
    rl, run_id = await one_dead_letter(make_runtime)
    letters = rl.dead_letters
    cases: list[tuple[Awaitable[Any], ErrorCode]] = [
        (letters.list(topic="nope"), ErrorCode.TOPIC_NOT_FOUND),
        (letters.list(subscription="nope"), ErrorCode.SUBSCRIPTION_NOT_FOUND),
        (letters.list(limit=0), ErrorCode.CONFIGURATION_INVALID),
        (letters.list(limit=1001), ErrorCode.CONFIGURATION_INVALID),
        (letters.list(cursor="not-a-cursor"), ErrorCode.CONFIGURATION_INVALID),
        (letters.get("unknown"), ErrorCode.DEAD_LETTER_NOT_FOUND),
        (letters.get(run_id, subscription="nope"), ErrorCode.SUBSCRIPTION_NOT_FOUND),
        (letters.replay("unknown"), ErrorCode.DEAD_LETTER_NOT_FOUND),
        (letters.replay(run_id, reason="x" * 1001), ErrorCode.CONFIGURATION_INVALID),
        (letters.replay(run_id, reason="a\x00b"), ErrorCode.CONFIGURATION_INVALID),
        (letters.replay(run_id, actor="not:an:id"), ErrorCode.CONFIGURATION_INVALID),
        (letters.discard(run_id, reason=""), ErrorCode.CONFIGURATION_INVALID),
        (letters.discard("unknown", reason=""), ErrorCode.CONFIGURATION_INVALID),
        (letters.discard("unknown", reason="x"), ErrorCode.DEAD_LETTER_NOT_FOUND),
        (rl.subscriptions.get("nope"), ErrorCode.SUBSCRIPTION_NOT_FOUND),
        (rl.subscriptions.halted_keys("s", limit=0), ErrorCode.CONFIGURATION_INVALID),
    ]
    for call, code in cases:
        await refused_with(call, code)
    assert await status_of(rl, run_id) is RunStatus.DEAD_LETTERED


__all__ = [name for name in dir() if name.startswith("test_")]
