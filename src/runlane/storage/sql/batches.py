"""Checks on a batch before any of it is written, the same in every SQL driver."""

from __future__ import annotations

from collections.abc import Sequence

from runlane.core.errors import ErrorCode, RunlaneError
from runlane.storage.protocol import NewRun


def check_distinct_ids(runs: Sequence[NewRun]) -> None:
    """Refuse a batch that names one run id twice, before anything is written: a batch
    is created whole or not at all, and two runs cannot share an id."""
    if len(runs) < 2:
        return
    seen: set[str] = set()
    for new in runs:
        if new.id in seen:
            raise RunlaneError(
                ErrorCode.STORAGE_CONFLICT,
                f"create_runs got run id {new.id!r} twice in one batch; nothing was created. "
                "Give each run of a batch its own id.",
            )
        seen.add(new.id)
