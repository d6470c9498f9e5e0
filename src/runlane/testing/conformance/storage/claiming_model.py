"""Claims against the reference model: a property test drives random histories
(publishes, claims, settles, replays, discards, cancellations, time passing) through
the driver and checks every claim against :func:`runlane.topics.claiming.claim_batch`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runlane import RunStatus
from runlane.model.transitions import request_cancellation
from runlane.ports.storage import RunFilter, Storage, Transition
from runlane.testing.conformance.storage.claiming_by_mode import (
    EXCLUSIVE,
    MAIN,
    NONE,
    ORDERED,
    cancelled_transition,
    dead_letter_transition,
    lease_at,
    release_transition,
    retry_transition,
    stored_run,
    succeed_transition,
)
from runlane.testing.conformance.storage.methods import NOW
from runlane.testing.conformance.storage.topics import (
    delivery,
    discard_transition,
    message,
    message_store,
    replay_transition,
)
from runlane.topics.claiming import claim_batch, claimable_deliveries
from runlane.topics.states import delivery_state
from runlane.types.runs import Run

# -- the reference model ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Step:
    kind: str
    target: int = 0
    arg: int = 0


_ACTIONS = [
    "claim_run", "succeed", "retry", "release", "dead_letter", "replay", "discard", "cancel",
    "cancelled",
]  # fmt: skip
_publish_step = st.builds(
    _Step,
    st.just("publish"),
    st.integers(0, 5),  # subscription and mode: _SUBSCRIPTIONS[n % 2], _MODES[n // 2]
    st.sampled_from([0, 0, 1, 2]),  # the key: _KEYS[n], mostly one key so deliveries meet
)
_action_step = st.builds(_Step, st.sampled_from(_ACTIONS), st.integers(0, 30), st.integers(0, 4))
_claim_step = st.builds(_Step, st.just("claim"), st.just(0), st.integers(1, 5))
_time_step = st.builds(_Step, st.just("time"), st.just(0), st.integers(1, 40))
# Weighted towards publishing and claiming, so keys fill up and contend.
_steps = st.one_of(
    _publish_step, _publish_step, _claim_step, _claim_step, _action_step, _action_step, _time_step
)
_SUBSCRIPTIONS = ("a", "b")
_MODES = (EXCLUSIVE, ORDERED, NONE)
_KEYS = ("k1", "k2", None)


async def _run_history(store: Storage, environment: str, steps: list[_Step]) -> None:
    now = NOW
    ids: list[str] = []
    topics = message_store(store)
    for number, step in enumerate(steps):
        if step.kind == "publish":
            subscription = _SUBSCRIPTIONS[step.target % 2]
            mode = _MODES[step.target // 2]
            key = None if mode is NONE else _KEYS[step.arg]
            run_id = f"d{len(ids):03d}"
            published = message(
                f"m-{environment}-{run_id}",
                delivery(run_id, subscription, mode=mode, key=key),
                at=now,
            )
            await topics.publish_messages(environment, [published], now)
            ids.append(run_id)
            continue
        if step.kind == "time":
            now += timedelta(seconds=step.arg)
            continue
        if step.kind == "claim":
            runs = (await store.list_runs(environment, RunFilter(), 200, None)).data
            expected = claim_batch([delivery_state(r) for r in runs], now, step.arg)
            claimed = await store.claim_due_runs(
                environment, [MAIN], step.arg, lease_at(now, f"w{number}"), now
            )
            # Which runs, not the order they come back in.
            assert sorted(r.id for r in claimed) == sorted(d.id for d in expected), (now, runs)
            continue
        if not ids:
            continue
        run = await stored_run(store, environment, ids[step.target % len(ids)])
        await _act(store, environment, run, step, now)


async def _act(store: Storage, environment: str, run: Run, step: _Step, now: datetime) -> None:
    """One operator or worker action on ``run`` where its status allows it (compare-and-set
    refusals are fine: the action simply does not happen)."""
    later = now + timedelta(seconds=step.arg * 3)
    transition: Transition | None = None
    if step.kind == "claim_run":
        runs = (await store.list_runs(environment, RunFilter(), 200, None)).data
        alone = {d.id for d in claimable_deliveries([delivery_state(r) for r in runs], now)}
        claimed = await store.claim_run(environment, run.id, lease_at(now), now)
        assert (claimed is not None) == (run.id in alone), (run.id, now, runs)
        return
    if run.status is RunStatus.RUNNING and run.lease is not None:
        if step.kind == "succeed":
            transition = succeed_transition(run)
        elif step.kind == "retry":
            transition = retry_transition(run, later)
        elif step.kind == "release":
            transition = release_transition(run, later)
        elif step.kind == "dead_letter":
            transition = dead_letter_transition(run, now)
        elif step.kind == "cancelled":
            transition = cancelled_transition(run)
        elif step.kind == "cancel":
            transition = request_cancellation(run, "stop")
    elif run.status is RunStatus.CANCELLATION_REQUESTED and step.kind == "cancelled":
        transition = cancelled_transition(run)
    elif run.status is RunStatus.DEAD_LETTERED and step.kind in ("replay", "discard"):
        transition = (
            replay_transition(run, at=now) if step.kind == "replay" else discard_transition(run)
        )
    elif step.kind == "cancel" and run.status in (
        RunStatus.QUEUED,
        RunStatus.RETRYING,
        RunStatus.RELEASED,
    ):
        transition = request_cancellation(run, "stop")
    if transition is not None:
        await store.apply_transitions(environment, [transition], now)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_steps, min_size=1, max_size=60))
async def test_claims_agree_with_the_reference_model(
    storage: Storage, environment: str, steps: list[_Step]
) -> None:
    # Each example gets an environment of its own: examples share the fixture's store.
    await _run_history(storage, f"{environment}-{uuid.uuid4().hex[:8]}", steps)


__all__ = [name for name in dir() if name.startswith("test_")]
