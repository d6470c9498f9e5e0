"""The demo's own app: three queues and three tasks that succeed, retry, fail and release.

Whether a run misbehaves is decided when it is triggered (see
:func:`plan_payloads`) and carried in its payload, so a run behaves the same on
every attempt and a seed reproduces a whole demo.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runlane import Context, RetryPolicy, Runlane, TaskDef, queue, sqlite_lane, task

#: Retries and releases wait tens of milliseconds, so a demo finishes in seconds.
DEMO_RETRY = RetryPolicy(max_attempts=4, initial_delay="50ms", max_delay="200ms")
RELEASE_DELAY = "50ms"

emails = queue("emails", default=True)
reports = queue("reports")
billing = queue("billing")


@task("emails.send", queue=emails, retry=DEMO_RETRY)
async def send_email(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Async; a few mail servers are busy on the first attempt."""
    await asyncio.sleep(0)
    if payload["busy_once"] and ctx.attempt == 1:
        raise ConnectionError("mail server busy, try again")
    return {"delivered_to": payload["to"]}


@task("reports.render", queue=reports, retry=DEMO_RETRY)
def render_report(payload: dict[str, Any], ctx: Context) -> Any:
    """Sync (runs in a thread); some reports wait once for their data with a release."""
    if payload["data_late"] and ctx.attempt == 1:
        return ctx.release(RELEASE_DELAY, reason="source data not ready")
    return {"rows": sum(range(payload["rows"]))}


@task("billing.charge", queue=billing, retry=DEMO_RETRY)
async def charge_card(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Async; declined cards retry with backoff, and a card declined four times fails."""
    if ctx.attempt <= payload["declines"]:
        raise RuntimeError(f"card declined (attempt {ctx.attempt})")
    return {"charged_cents": payload["cents"]}


DEMO_QUEUES = (emails, reports, billing)
DEMO_TASKS: tuple[TaskDef[Any], ...] = (send_email, render_report, charge_card)

BUSY_EMAIL_RATE = 0.1
LATE_REPORT_RATE = 0.2
#: Declines per charge and their weights; four declines exhaust DEMO_RETRY.
DECLINE_WEIGHTS = ((0, 80), (1, 10), (2, 5), (3, 3), (4, 2))


def _email_payload(number: int, rng: random.Random) -> dict[str, Any]:
    return {"to": f"user{number}@example.com", "busy_once": rng.random() < BUSY_EMAIL_RATE}


def _report_payload(number: int, rng: random.Random) -> dict[str, Any]:
    return {"rows": rng.randint(10, 1000), "data_late": rng.random() < LATE_REPORT_RATE}


def _charge_payload(number: int, rng: random.Random) -> dict[str, Any]:
    declines, weights = zip(*DECLINE_WEIGHTS, strict=True)
    return {"cents": rng.randint(100, 10_000), "declines": rng.choices(declines, weights)[0]}


PayloadMaker = Callable[[int, random.Random], dict[str, Any]]

#: Each task, its share of the runs, and how its payloads are drawn.
TASK_MIX: tuple[tuple[TaskDef[Any], float, PayloadMaker], ...] = (
    (send_email, 0.5, _email_payload),
    (render_report, 0.25, _report_payload),
    (charge_card, 0.25, _charge_payload),
)


def build_runtime(path: Path, environment: str) -> Runlane:
    """The demo runtime on a SQLite file."""
    return Runlane(
        lane=sqlite_lane(path),
        queues=DEMO_QUEUES,
        tasks=DEMO_TASKS,
        environment=environment,
    )


def plan_payloads(total: int, rng: random.Random) -> list[tuple[TaskDef[Any], list[Any]]]:
    """``total`` payloads split across the tasks by :data:`TASK_MIX`."""
    counts = [int(total * share) for _, share, _ in TASK_MIX]
    counts[0] += total - sum(counts)
    return [
        (definition, [make(number, rng) for number in range(count)])
        for (definition, _, make), count in zip(TASK_MIX, counts, strict=True)
    ]
