"""What a sampled attempt's span costs, the observer's part against the SDK's own.

``bench_instructions.py --otel-ratio 1`` counts a whole traced drain; this counts, with
``valgrind --tool=callgrind --instr-atstart=no``, loops of 2,000 sampled attempts with
no drain around them, each in a child process, so the OpenTelemetry observer's own
steps can be set against the SDK called directly with the same arguments::

    .venv/bin/python bench/bench_otel_attempt.py
    .venv/bin/python bench/bench_otel_attempt.py --src /other/tree/src

The SDK is the one the observability guide recommends, as ``bench_instructions.py``
sets it up: ``ParentBased(TraceIdRatioBased(1.0))`` here (every attempt sampled), a
``BatchSpanProcessor`` exporting to an exporter that discards. Each run holds its
stored carrier as the SQL drivers leave it (the JSON text of one sampled
``traceparent``). Loops (instructions per attempt):

- ``hook``: the observer's ``attempt`` hook alone (the carrier's check, its span
  context parsed, the scope built);
- ``hook+handler``: the hook, then the scope entered and left as around a handler
  (the span started, its context made current and reset); the spans are kept, not
  ended;
- ``attempt``: all of it, and the span ended once the outcome is set, as the batch's
  flush ends it;
- ``sdk-start``: the SDK alone, ``start_span`` with the attributes, the parent and the
  link the observer gives it (parent contexts extracted before counting); kept;
- ``sdk-span``: that, with the outcome attribute set and the span ended.

``attempt`` less ``sdk-span`` is what the observer adds to the SDK's span.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

LOOPS = ("hook", "hook+handler", "attempt", "sdk-start", "sdk-span")
ATTEMPTS = 2_000
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def _callgrind(state: str) -> None:
    command = ["callgrind_control", "-i", state, str(os.getpid())]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _child(loop: str, count: int) -> None:
    from datetime import UTC, datetime

    from bench_instructions import _tracing  # the same SDK setup as the drains
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from runlane import Attempt, AttemptOutcome
    from runlane.types.runs import Run, RunStatus

    observers, provider = _tracing("sqlite-otel10", 1.0)  # every attempt sampled
    (tracing,) = observers
    propagator = TraceContextTextMapPropagator()  # the global one, as the observer finds
    tracer = provider.get_tracer("runlane")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    random.seed(1)
    headers = [
        f"00-{random.getrandbits(128):032x}-{random.getrandbits(64):016x}-01" for _ in range(count)
    ]
    # Each run holds its carrier as a SQL driver leaves it: the JSON text, decoded only
    # if something reads ``run.trace_carrier``.
    texts: list[Any] = [
        json.dumps({"traceparent": header}, separators=(",", ":")) for header in headers
    ]
    attempts = [
        Attempt(Run(f"r{n}", "default", "bench.noop", "main", RunStatus.RUNNING, None, 1, 0,
                    now, now, now, 2, trace_carrier=text), "w1")
        for n, text in enumerate(texts)
    ]  # fmt: skip
    parents = [propagator.extract({"traceparent": header}) for header in headers]
    kept: list[Any] = []
    kind = trace.SpanKind.CONSUMER

    def sdk_start(attempt: Any, parent: Any) -> Any:
        run = attempt.run
        created = trace.get_current_span(parent).get_span_context()
        return tracer.start_span(
            f"execute {run.task_id}",
            context=parent,
            kind=kind,
            links=(trace.Link(created),),
            attributes={
                "messaging.system": "runlane",
                "messaging.destination.name": run.queue,
                "messaging.operation.name": "execute",
                "messaging.operation.type": "process",
                "messaging.message.id": run.id,
                "runlane.task_id": run.task_id,
                "runlane.environment": "",
                "runlane.attempt": run.attempt,
                "runlane.worker_id": attempt.worker_id,
            },
        )

    tracing.attempt(attempts[0])  # the globals looked up before counting
    _callgrind("on")
    if loop == "hook":
        for attempt in attempts:
            kept.append(tracing.attempt(attempt))
    elif loop in ("hook+handler", "attempt"):
        end = loop == "attempt"
        for attempt in attempts:
            scope: Any = tracing.attempt(attempt)
            scope.__enter__()
            scope.__exit__(None, None, None)
            if end:
                attempt.outcome = AttemptOutcome.SUCCEEDED
                scope.attempt_ended()
            else:
                kept.append(scope)
    else:
        end = loop == "sdk-span"
        for attempt, parent in zip(attempts, parents, strict=True):
            span = sdk_start(attempt, parent)
            if end:
                span.set_attribute("runlane.outcome", "succeeded")
                span.end()
            else:
                kept.append(span)
    _callgrind("off")
    provider.shutdown()


def _count(loop: str, src: str | None) -> int:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as folder:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={Path(folder) / 'loop.out'}",
            sys.executable,
            __file__,
            "--child",
            loop,
        ]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{loop} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=LOOPS, help=argparse.SUPPRESS)
    parser.add_argument("--src", help="Another checkout's src, first on the child's path.")
    args = parser.parse_args()
    if args.child:
        _child(args.child, ATTEMPTS)
        return
    counts = {loop: _count(loop, args.src) / ATTEMPTS for loop in LOOPS}
    for loop, count in counts.items():
        print(f"{loop:<14}{count:>10,.0f} instructions per sampled attempt")
    added = counts["attempt"] - counts["sdk-span"]
    print(f"the observer adds {added:,.0f} to the SDK's span ({added / counts['sdk-span']:+.1%})")


if __name__ == "__main__":
    main()
