"""Checks on a batch before any of it is written, and what it asks of the tables beside
the runs, the same in every SQL driver."""

from __future__ import annotations

from collections.abc import Sequence

from runlane.ports.storage import NewMessage, NewRun
from runlane.types.errors import ErrorCode, RunlaneError


def check_distinct_ids(runs: Sequence[NewRun]) -> None:
    """Refuse a batch that names one run id twice, before anything is written: a batch
    is created whole or not at all, and two runs cannot share an id."""
    if len(runs) >= 2:
        check_distinct_run_ids([new.id for new in runs])


def keyed_queues(runs: Sequence[NewRun]) -> set[str]:
    """The queues of the runs with a concurrency key: the batch names them in
    ``runlane_partitioned_queues`` (their bounded claims rank per key from then on)."""
    return {new.queue for new in runs if new.concurrency_key is not None}


def check_distinct_run_ids(ids: Sequence[str]) -> None:
    """:func:`check_distinct_ids` of a batch's run ids."""
    if len(set(ids)) == len(ids):
        return
    seen: set[str] = set()
    for run_id in ids:
        if run_id in seen:
            raise RunlaneError(
                ErrorCode.STORAGE_CONFLICT,
                f"create_runs got run id {run_id!r} twice in one batch; nothing was created. "
                "Give each run of a batch its own id.",
            )
        seen.add(run_id)


def check_distinct_delivery_ids(messages: Sequence[NewMessage]) -> None:
    """Refuse a publish that names one delivery run id twice, before anything is written."""
    seen: set[str] = set()
    for message in messages:
        for delivery in message.deliveries:
            if delivery.run_id in seen:
                raise RunlaneError(
                    ErrorCode.STORAGE_CONFLICT,
                    f"publish_messages got delivery run id {delivery.run_id!r} twice; nothing "
                    "was published. Give each delivery its own run id.",
                )
            seen.add(delivery.run_id)


def taken_run_id(run_id: str) -> RunlaneError:
    """A delivery run id that already names a run: the publish writes nothing."""
    return RunlaneError(
        ErrorCode.STORAGE_CONFLICT,
        f"run id {run_id!r} already exists; nothing was published. Publish again with new "
        "delivery run ids.",
        retryable=True,
    )
