"""What the CLI watches through observers: live lines, the drain progress bar, and
the Prometheus endpoint of ``--metrics-port``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from runlane import Attempt, AttemptOutcome, Observer, Run, Runlane, RunStatus
from runlane.cli.output import STATUS_STYLES, clock_label, console, print_json_line, print_notice
from runlane.operator import run_row

F = TypeVar("F", bound=Callable[..., Any])


def failure_text(run: Run) -> str | None:
    """``code: message`` of a run that failed, will retry or was dead-lettered."""
    if run.failure is None or run.status not in _FAILING:
        return None
    return f"{run.failure.code}: {run.failure.message}"


_FAILING = (RunStatus.RETRYING, RunStatus.FAILED, RunStatus.DEAD_LETTERED)


def dead_letter_text(attempt: Attempt) -> str | None:
    """``reason; code: message`` of a dead-lettered delivery (why it was parked)."""
    run = attempt.settled
    if attempt.outcome is not AttemptOutcome.DEAD_LETTERED or run is None:
        return None
    parts = (attempt.dead_letter_reason, failure_text(run))
    return "; ".join(part for part in parts if part) or None


def release_text(attempt: Attempt) -> str | None:
    """``reason, in 5s`` of a released attempt (what the task said, and when it is due)."""
    if attempt.outcome is not AttemptOutcome.RELEASED:
        return None
    delay = f"again in {attempt.delay_seconds:g}s" if attempt.delay_seconds is not None else None
    return ", ".join(part for part in (attempt.release_reason, delay) if part) or None


class LiveLines(Observer):
    """One line per settled attempt on stdout: for people, or JSON with ``as_json``."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json

    def settled(self, attempt: Attempt) -> None:
        run = attempt.settled
        if run is None:
            return  # lease lost: nothing was written, the log line says so
        failure = failure_text(run)
        released = release_text(attempt)
        if self.as_json:
            print_json_line(
                {
                    **run_row(run),
                    "failure": failure,
                    "release_reason": attempt.release_reason,
                    "dead_letter_reason": attempt.dead_letter_reason,
                    "duration": round(attempt.duration, 6),
                }
            )
            return
        style = STATUS_STYLES[run.status]
        note = dead_letter_text(attempt) or failure or released
        console().print(
            f"{clock_label()} {run.id} {escape(run.task_id)} attempt {run.attempt} "
            f"→ [{style}]{run.status.value}[/]" + (f" ({escape(note)})" if note else ""),
            soft_wrap=True,
        )


class DrainProgress(Observer):
    """A progress bar of runs finished while draining (on a terminal, instead of lines)."""

    def __init__(self, progress: Progress, total: int) -> None:
        self._progress = progress
        self._bar = progress.add_task("draining", total=max(total, 1))
        self._total = max(total, 1)
        self._done = 0

    def settled(self, attempt: Attempt) -> None:
        run = attempt.settled
        if run is None or not run.status.is_terminal:
            return
        self._done += 1
        if self._done > self._total:
            # Runs triggered while draining: grow the bar rather than overflow it.
            self._total = self._done
            self._progress.update(self._bar, total=self._total)
        self._progress.advance(self._bar)


@contextlib.contextmanager
def drain_progress(rl: Runlane, total: int, out: Console | None = None) -> Iterator[None]:
    """Show a :class:`DrainProgress` bar on ``out`` (stdout) for the duration of the block."""
    progress = Progress(
        TextColumn("[bold]draining"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out or console(),
        transient=False,
    )
    rl.add_observer(DrainProgress(progress, total))
    with progress:
        yield


def metrics_options(fn: F) -> F:
    """``--metrics-port`` and ``--metrics-host``: serve Prometheus process metrics."""
    fn = click.option(
        "--metrics-host",
        default="127.0.0.1",
        show_default=True,
        help="Address the metrics endpoint listens on.",
    )(fn)
    return click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        help="Serve Prometheus metrics of this process at http://HOST:PORT/metrics (0: any "
        "free port). Needs runlane[metrics].",
    )(fn)


@contextlib.contextmanager
def serving_metrics(rl: Runlane, port: int | None, host: str) -> Iterator[None]:
    """Attach the Prometheus observer to ``rl`` and serve the default registry on
    ``host:port`` while the block runs (nothing without a port)."""
    if port is None:
        yield
        return
    from runlane.metrics import prometheus_metrics

    rl.add_observer(prometheus_metrics())
    import prometheus_client

    server, thread = prometheus_client.start_http_server(port, addr=host)
    try:
        print_notice(f"metrics: http://{host}:{server.server_port}/metrics")
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
