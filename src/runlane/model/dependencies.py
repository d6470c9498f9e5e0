"""Dependencies between runs (contract 8.1): the rules checked before anything is
written, and what a dependency's status means to the runs that wait for it.

Storage applies the release itself (see the ``run_dependencies`` migration of each
driver): when the last dependency of a WAITING run settles, in that transaction, the
run becomes due or is cancelled with reason :data:`DEPENDENCY_FAILED`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.runs import Run, RunStatus

#: The most dependencies one run may have.
MAX_DEPENDENCIES = 1000
#: The most members one group may have.
MAX_GROUP_MEMBERS = 10_000
#: ``on_failure`` policies: a failed or cancelled dependency cancels the run, or not.
CANCEL = "cancel"
RUN = "run"
ON_FAILURE_POLICIES = (CANCEL, RUN)
#: The cancel reason of a run whose dependency failed or was cancelled.
DEPENDENCY_FAILED = "dependency_failed"
#: Statuses that settle a dependency: its dependents stop waiting for it. A
#: dead-lettered delivery counts as failed (a replay does not reopen its dependents).
SETTLED_STATUSES = frozenset(
    {
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.DISCARDED,
        RunStatus.DEAD_LETTERED,
    }
)


def dependency_ids(after: Iterable[Run | str], environment: str) -> tuple[str, ...]:
    """The run ids of ``after`` (runs or ids), in order, without repeats.

    A run of another environment is ``RUN_NOT_FOUND`` here, before anything is
    written; ids are looked up by storage, in the creating transaction.
    """
    if isinstance(after, (str, bytes, Run)):
        raise configuration_error("after must be a list of runs or run ids.")
    ids: dict[str, None] = {}
    for item in after:
        if isinstance(item, Run):
            if item.environment != environment:
                raise RunlaneError(
                    ErrorCode.RUN_NOT_FOUND,
                    f"run {item.id} is not a run of environment {environment!r}; "
                    "a run may only depend on runs of its own environment.",
                    meta={"run_id": item.id, "environment": environment},
                )
            ids[item.id] = None
        elif isinstance(item, str) and item:
            ids[item] = None
        else:
            raise configuration_error(
                f"after holds {type(item).__name__!s}; pass runs or run ids (non-empty strings)."
            )
    if len(ids) > MAX_DEPENDENCIES:
        raise configuration_error(
            f"a run may depend on at most {MAX_DEPENDENCIES} runs; got {len(ids)}."
        )
    return tuple(ids)


def validate_on_failure(on_failure: Any) -> str:
    """``on_failure`` checked: ``"cancel"`` or ``"run"``."""
    if on_failure not in ON_FAILURE_POLICIES:
        raise configuration_error(f"on_failure must be 'cancel' or 'run'; got {on_failure!r}.")
    return str(on_failure)


def unsettled_and_failed(
    after: Sequence[str], statuses: dict[str, RunStatus]
) -> tuple[int, str | None]:
    """For a run created ``after`` runs whose current ``statuses`` are known: how many
    it still waits for, and the first of the settled ones that did not succeed."""
    pending = 0
    failed: str | None = None
    for run_id in after:
        status = statuses[run_id]
        if status not in SETTLED_STATUSES:
            pending += 1
        elif status is not RunStatus.SUCCEEDED and failed is None:
            failed = run_id
    return pending, failed


def missing_dependencies(after: Sequence[str], found: Iterable[str]) -> RunlaneError | None:
    """``RUN_NOT_FOUND`` naming the ids of ``after`` storage did not find, or ``None``."""
    known = set(found)
    missing = [run_id for run_id in after if run_id not in known]
    if not missing:
        return None
    shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
    return RunlaneError(
        ErrorCode.RUN_NOT_FOUND,
        f"dependencies not found in this environment: {shown}; nothing was written.",
        meta={"run_ids": missing[:100]},
    )
