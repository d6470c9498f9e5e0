"""Fuzzing the Lambda handler with real runs: one bad record never costs a good one.

Each example builds an SQS event of 0 to 10 records — wakeups for real runs,
duplicates, wakeups for runs that do not exist or live elsewhere, runs whose task
fails, garbage bodies and bodies of the wrong type — and hands it to
``create_sqs_lambda_handler`` wired to a real runtime on each storage driver.

The property: the handler returns a partial batch response (it never raises for
a bad body); every record it could not resolve is reported by its message id
and no other is; every good run executes exactly once however often its wakeup
appears; and an event whose records cannot all be named (no usable messageId)
is refused with a typed error before anything executes.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import LaneFactory

from runlane import Context, ErrorCode, RetryPolicy, Runlane, RunlaneError, RunStatus, queue, task
from runlane.ports.transport import DeliveryMessage
from runlane.sqs import create_sqs_lambda_handler, create_sqs_wakeup_body, parse_sqs_wakeup_body
from runlane.transport.sqs.lambda_handler import lambda_event_loop

MAIN = queue("main", default=True)
OTHER = queue("other")

FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# NUL in a run id is an identifier question the identifier tests answer on each lane.
text = st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


class Executions:
    """Every attempt the task started, by run id, in this process."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()


executions = Executions()


@task("fuzz.work", retry=RetryPolicy(max_attempts=3, initial_delay="1h", max_delay="1h"))
async def work(payload: dict[str, Any], ctx: Context) -> str:
    executions.counts[ctx.run_id] += 1
    if payload.get("fail"):
        raise RuntimeError("the task failed, as this record asked")
    return "done"


@pytest.fixture
def runtime(lane_factory: LaneFactory, environment: str) -> Iterator[Runlane]:
    """A runtime opened on the handler's own loop, as a module-level runtime in Lambda is."""
    rl = Runlane(lane=lane_factory(), queues=[MAIN, OTHER], tasks=[work], environment=environment)
    loop = lambda_event_loop()
    loop.run_until_complete(rl.migrate())
    loop.run_until_complete(rl.open())
    try:
        yield rl
    finally:
        loop.run_until_complete(rl.close())


@dataclass(frozen=True)
class Record:
    """One record of the event and what the handler must do with it."""

    kind: str
    body: Any = None
    duplicate_of_previous: bool = False


GOOD_KINDS = ["good", "fails_in_task", "good_again"]
IGNORED_KINDS = ["not_found", "foreign_environment", "wrong_queue"]

garbage_bodies = (
    text
    | json_values.map(json.dumps)
    | st.builds(
        lambda key, value: json.dumps(
            {"type": "runlane.wakeup", "version": 1, "message": {"run_id": "r", key: value}}
        ),
        st.sampled_from(["environment", "queue", "requested_at", "trace_carrier", "extra"]),
        json_values,
    )
    | json_values.filter(lambda value: not isinstance(value, str))
)
records = st.one_of(
    st.sampled_from(GOOD_KINDS + IGNORED_KINDS).map(Record),
    garbage_bodies.map(lambda body: Record("garbage", body)),
    st.just(Record("repeat", duplicate_of_previous=True)),
)
unnamed_records = st.one_of(
    st.sampled_from([None, "a record", 7, [], {}]),
    st.sampled_from([None, "", 7, ["m"]]).map(lambda message_id: {"messageId": message_id}),
)


def sqs_record(message_id: str, body: Any) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": f"handle-{message_id}",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "eventSource": "aws:sqs",
    }


def wakeup(rl: Runlane, run_id: str, *, queue: str = "main", environment: str = "") -> str:
    return create_sqs_wakeup_body(DeliveryMessage(environment or rl.environment, run_id, queue))


def resolves(body: Any) -> bool:
    """Whether the handler can resolve this body at all (it parses as a wakeup)."""
    if not isinstance(body, str):
        return False
    try:
        parse_sqs_wakeup_body(body)
    except RunlaneError:
        return False
    return True


@FUZZ
@given(plan=st.lists(records, max_size=10))
def test_bad_records_fail_alone_and_good_runs_execute_exactly_once(
    runtime: Runlane, plan: list[Record]
) -> None:
    rl = runtime
    loop = lambda_event_loop()
    event_records: list[dict[str, Any]] = []
    expected_failed: set[str] = set()
    good_runs: set[str] = set()
    failing_runs: set[str] = set()
    wrong_queue_runs: set[str] = set()
    for index, item in enumerate(plan):
        if item.kind == "repeat":
            if event_records:
                event_records.append(dict(event_records[-1]))
            continue
        message_id = f"m-{index}-{uuid.uuid4().hex[:6]}"
        body = item.body
        if item.kind in ("good", "good_again", "fails_in_task", "wrong_queue"):
            payload = {"fail": item.kind == "fails_in_task"}
            run = loop.run_until_complete(rl.trigger(work, payload))
            {"fails_in_task": failing_runs, "wrong_queue": wrong_queue_runs}.get(
                item.kind, good_runs
            ).add(run.id)
            body = wakeup(rl, run.id, queue="other" if item.kind == "wrong_queue" else "main")
            if item.kind == "good_again":
                event_records.append(sqs_record(f"{message_id}-first", body))
        elif item.kind == "not_found":
            body = wakeup(rl, f"run_{uuid.uuid4().hex}")
        elif item.kind == "foreign_environment":
            body = wakeup(rl, f"run_{uuid.uuid4().hex}", environment="elsewhere")
        elif not resolves(body):
            expected_failed.add(message_id)
        event_records.append(sqs_record(message_id, body))

    handler = create_sqs_lambda_handler(execute_delivery=rl.execute_delivery)
    response = handler({"Records": event_records}, None)

    assert set(response) == {"batchItemFailures"}
    reported = [failure["itemIdentifier"] for failure in response["batchItemFailures"]]
    assert set(reported) == expected_failed
    for run_id in good_runs | failing_runs:
        assert executions.counts[run_id] == 1, run_id
    for run_id in wrong_queue_runs:
        assert executions.counts[run_id] == 0, run_id
    statuses = {
        run_id: loop.run_until_complete(rl.runs.get(run_id)).status
        for run_id in good_runs | failing_runs | wrong_queue_runs
    }
    assert all(statuses[run_id] is RunStatus.SUCCEEDED for run_id in good_runs)
    assert all(statuses[run_id] is RunStatus.RETRYING for run_id in failing_runs)
    assert all(statuses[run_id] is RunStatus.QUEUED for run_id in wrong_queue_runs)


@FUZZ
@given(
    before=st.integers(min_value=0, max_value=5),
    unnamed=unnamed_records,
    after=st.integers(min_value=0, max_value=4),
)
def test_an_event_with_a_record_that_cannot_be_named_is_refused_before_anything_runs(
    runtime: Runlane, before: int, unnamed: Any, after: int
) -> None:
    rl = runtime
    loop = lambda_event_loop()
    runs = [loop.run_until_complete(rl.trigger(work, {})) for _ in range(before + after)]
    bodies = [sqs_record(f"m-{run.id}", wakeup(rl, run.id)) for run in runs]
    handler = create_sqs_lambda_handler(execute_delivery=rl.execute_delivery)

    with pytest.raises(RunlaneError) as raised:
        handler({"Records": [*bodies[:before], unnamed, *bodies[before:]]}, None)

    assert raised.value.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION
    assert all(executions.counts[run.id] == 0 for run in runs)
    for run in runs:
        assert loop.run_until_complete(rl.runs.get(run.id)).status is RunStatus.QUEUED


@FUZZ
@given(plan=st.lists(records, max_size=10))
def test_a_fifo_batch_executes_up_to_its_first_bad_record_and_returns_the_rest(
    runtime: Runlane, plan: list[Record]
) -> None:
    rl = runtime
    loop = lambda_event_loop()
    event_records: list[dict[str, Any]] = []
    runnable: set[str] = set()
    for index, item in enumerate(plan):
        if item.kind == "repeat":
            if event_records:
                event_records.append(dict(event_records[-1]))
            continue
        body = item.body
        if item.kind in ("good", "good_again", "fails_in_task", "wrong_queue"):
            run = loop.run_until_complete(rl.trigger(work, {"fail": item.kind == "fails_in_task"}))
            body = wakeup(rl, run.id, queue="other" if item.kind == "wrong_queue" else "main")
            if item.kind != "wrong_queue":
                runnable.add(run.id)
        elif item.kind in ("not_found", "foreign_environment"):
            body = wakeup(rl, f"run_{uuid.uuid4().hex}", environment="elsewhere")
        event_records.append(sqs_record(f"m-{index}-{uuid.uuid4().hex[:6]}", body))
    first_bad = next(
        (i for i, r in enumerate(event_records) if not resolves(r["body"])), len(event_records)
    )

    handler = create_sqs_lambda_handler(execute_delivery=rl.execute_delivery, fifo=True)
    response = handler({"Records": event_records}, None)

    reported = [failure["itemIdentifier"] for failure in response["batchItemFailures"]]
    assert reported == [r["messageId"] for r in event_records[first_bad:]]
    handled = {parse_sqs_wakeup_body(r["body"]).run_id for r in event_records[:first_bad]}
    for run_id in handled & runnable:
        assert executions.counts[run_id] == 1, run_id
    for r in event_records[first_bad:]:
        if resolves(r["body"]):
            run_id = parse_sqs_wakeup_body(r["body"]).run_id
            if run_id not in handled:
                assert executions.counts[run_id] == 0, "FIFO order: nothing after a failure runs"
