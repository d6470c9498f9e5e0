"""CloudWatch EMF from the SQS Lambda handler: one document per invocation, always."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    Release,
    RetryPolicy,
    Runlane,
    RunlaneError,
    queue,
    sqlite_lane,
    task,
)
from runlane.emf import emf_metrics
from runlane.ports.transport import DeliveryMessage
from runlane.sqs import create_sqs_lambda_handler, create_sqs_wakeup_body
from runlane.transport.sqs.lambda_handler import lambda_event_loop

MAIN = queue("main", default=True)
BILLING = queue("billing")
COUNTS = (
    "Records",
    "Executed",
    "Succeeded",
    "Retried",
    "Released",
    "Failed",
    "Cancelled",
    "Ignored",
    "DeliveryFailures",
    "NotStarted",
)


@task("emf.ok")
async def ok(payload: Any, ctx: Context) -> None:
    return None


@task("emf.retries", retry=RetryPolicy(max_attempts=3))
async def retries(payload: Any, ctx: Context) -> None:
    raise RuntimeError("again")


@task("emf.dies", retry=RetryPolicy(max_attempts=1))
async def dies(payload: Any, ctx: Context) -> None:
    raise RuntimeError("dead")


@task("emf.waits")
async def waits(payload: Any, ctx: Context) -> Release:
    return ctx.release("1h", reason="later")


@pytest.fixture
def rl(tmp_path: Path) -> Iterator[Runlane]:
    runtime = Runlane(
        lane=sqlite_lane(tmp_path / "emf.db"),
        queues=[MAIN, BILLING],
        tasks=[ok, retries, dies, waits],
        environment="emf",
    )
    loop = lambda_event_loop()
    loop.run_until_complete(runtime.migrate())
    yield runtime
    loop.run_until_complete(runtime.close())


def wakeup(rl: Runlane, definition: Any, queue_name: str = "main") -> dict[str, Any]:
    run = lambda_event_loop().run_until_complete(rl.trigger(definition, None, queue=queue_name))
    return record(DeliveryMessage(rl.environment, run.id, queue_name))


def record(message: DeliveryMessage | None, body: str | None = None) -> dict[str, Any]:
    text = body if message is None else create_sqs_wakeup_body(message)
    name = message.run_id if message is not None else "broken"
    return {"messageId": f"msg-{name}", "receiptHandle": "h", "body": text, "attributes": {}}


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_one_document_per_invocation_counts_every_outcome(rl: Runlane) -> None:
    out = io.StringIO()
    handler = create_sqs_lambda_handler(
        execute_delivery=rl.execute_delivery,
        metrics=emf_metrics(namespace="Shop", dimensions={"Service": "billing"}, stream=out),
    )
    records = [
        wakeup(rl, ok),
        wakeup(rl, ok),
        wakeup(rl, retries),
        wakeup(rl, dies),
        wakeup(rl, waits),
        record(DeliveryMessage(rl.environment, "no-such-run", "main")),
        record(None, body="not a wakeup"),
    ]
    response = handler({"Records": records}, None)
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == ["msg-broken"]

    (doc,) = lines(out)
    (directive,) = doc["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Shop"
    assert directive["Dimensions"] == [["Queue", "Service"]]
    declared = [(m["Name"], m["Unit"]) for m in directive["Metrics"]]
    assert declared == [(name, "Count") for name in COUNTS] + [("DurationMs", "Milliseconds")]
    assert isinstance(doc["_aws"]["Timestamp"], int)
    assert doc["Queue"] == "main" and doc["Service"] == "billing"
    assert {name: doc[name] for name in COUNTS} == {
        "Records": 7,
        "Executed": 5,
        "Succeeded": 2,
        "Retried": 1,
        "Released": 1,
        "Failed": 1,
        "Cancelled": 0,
        "Ignored": 1,
        "DeliveryFailures": 1,
        "NotStarted": 0,
    }
    assert doc["DurationMs"] > 0

    # A second invocation writes a second document of its own.
    handler({"Records": [wakeup(rl, ok, "billing"), wakeup(rl, ok)]}, None)
    second = lines(out)[1]
    assert second["Queue"] == "mixed" and second["Records"] == 2 and second["Succeeded"] == 2


def test_the_document_is_written_when_the_invocation_raises(rl: Runlane) -> None:
    out = io.StringIO()

    def refuse(failure: Any) -> None:
        raise ValueError("the failure observer broke")

    handler = create_sqs_lambda_handler(
        execute_delivery=rl.execute_delivery,
        on_delivery_failure=refuse,
        metrics=emf_metrics(stream=out),
    )
    good = wakeup(rl, ok, "billing")
    with pytest.raises(ValueError, match="observer broke"):
        handler({"Records": [good, record(None, body="junk")]}, None)
    (doc,) = lines(out)
    assert doc["Queue"] == "billing" and doc["Records"] == 2
    assert doc["Executed"] == 1 and doc["Succeeded"] == 1
    assert doc["DeliveryFailures"] == 2  # the whole batch failed

    with pytest.raises(RunlaneError):
        handler({"no": "records"}, None)
    last = lines(out)[-1]
    assert last["Queue"] == "unknown" and last["Records"] == 0


def test_records_left_at_the_deadline_count_as_not_started(rl: Runlane) -> None:
    out = io.StringIO()

    class NearlyOut:
        def get_remaining_time_in_millis(self) -> int:
            return 1_000

    handler = create_sqs_lambda_handler(
        execute_delivery=rl.execute_delivery, metrics=emf_metrics(stream=out)
    )
    response = handler({"Records": [wakeup(rl, ok), wakeup(rl, ok)]}, NearlyOut())
    assert len(response["batchItemFailures"]) == 2
    (doc,) = lines(out)
    assert doc["NotStarted"] == 2 and doc["DeliveryFailures"] == 2 and doc["Executed"] == 0


def test_emf_lines_go_to_stdout_by_default(rl: Runlane, capsys: pytest.CaptureFixture[str]) -> None:
    handler = create_sqs_lambda_handler(execute_delivery=rl.execute_delivery, metrics=emf_metrics())
    handler({"Records": [wakeup(rl, ok)]}, None)
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["Succeeded"] == 1


@pytest.mark.parametrize(
    "options",
    [
        {"namespace": ""},
        {"dimensions": {"Queue": "x"}},
        {"dimensions": {"Service": 3}},
        {"dimensions": {f"d{n}": "v" for n in range(30)}},
        {"stream": object()},
    ],
)
def test_bad_emf_options_are_refused_up_front(options: dict[str, Any]) -> None:
    with pytest.raises(RunlaneError) as raised:
        emf_metrics(**options)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_the_handler_refuses_metrics_without_an_invocation_method() -> None:
    async def execute(message: DeliveryMessage, **options: Any) -> None:
        return None

    with pytest.raises(RunlaneError) as raised:
        create_sqs_lambda_handler(execute_delivery=execute, metrics=object())  # type: ignore[arg-type]
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
