"""Asserting on the runs your code triggered: ``assert_triggered`` and ``all_triggered``.

Like Oban's ``assert_enqueued``: a payload given as a mapping matches any run whose
payload holds those keys with those values (other keys are ignored), so a test states
only what it cares about.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pydantic import BaseModel

from runlane.core.run_operations import MAX_PAGE_SIZE
from runlane.core.runtime import Runlane
from runlane.model.definitions import TaskDef
from runlane.model.queue_defs import QueueDef
from runlane.types.errors import configuration_error
from runlane.types.runs import Run


class _AnyPayload:
    def __repr__(self) -> str:
        return "ANY_PAYLOAD"


#: The default of ``payload=``: every payload matches.
ANY_PAYLOAD: Final[Any] = _AnyPayload()

#: A failing ``assert_triggered`` lists at most this many of the runs it did find.
SHOWN_CANDIDATES = 10

#: Run fields a filter may name (``task_id`` and ``payload`` have their own parameters).
FILTERABLE_FIELDS = frozenset(f.name for f in dataclasses.fields(Run)) - {"task_id", "payload"}


async def all_triggered(
    rl: Runlane,
    task: TaskDef[Any] | str | None = None,
    *,
    payload: Any = ANY_PAYLOAD,
    **filters: Any,
) -> list[Run]:
    """Every run in ``rl``'s environment that matches, oldest first (any status).

    ``payload`` matches as described in :func:`assert_triggered`; each other keyword
    names a :class:`~runlane.Run` field and the value it must equal (``queue`` also
    takes a queue definition).

    >>> runs = await all_triggered(rl, send_welcome, queue="emails")
    >>> [run.payload["to"] for run in runs]
    ['ada@example.com', 'bo@example.com']
    """
    task_id = rl.registry.resolve_task(task).id if task is not None else None
    expected = _expected_fields(filters)
    runs: list[Run] = []
    cursor: str | None = None
    while True:
        page = await rl.runs.list(
            tasks=[task_id] if task_id is not None else None, limit=MAX_PAGE_SIZE, cursor=cursor
        )
        runs.extend(page.data)
        cursor = page.next_cursor
        if cursor is None:
            break
    runs.reverse()  # listings are newest first; tests read in the order things happened
    return [
        run
        for run in runs
        if _payload_matches(payload, run.payload)
        and all(getattr(run, name) == value for name, value in expected.items())
    ]


async def assert_triggered(
    rl: Runlane,
    task: TaskDef[Any] | str,
    *,
    payload: Any = ANY_PAYLOAD,
    count: int | None = None,
    **filters: Any,
) -> list[Run]:
    """Assert that runs of ``task`` matching ``payload`` and ``filters`` exist; return them.

    Without ``count`` at least one must match; with it exactly that many (``count=0``
    asserts that none does). A ``payload`` mapping (or pydantic model) matches runs whose
    payload holds those keys with those values, nested mappings alike; anything else must
    be equal. The error message lists the runs of ``task`` that do exist.

    >>> await assert_triggered(rl, send_welcome, payload={"to": "ada@example.com"})
    >>> await assert_triggered(rl, send_welcome, queue="emails", status="queued", count=2)
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise configuration_error("count must be a whole number of at least 0, or None.")
    definition = rl.registry.resolve_task(task)
    matching = await all_triggered(rl, definition, payload=payload, **filters)
    if len(matching) == count or (count is None and matching):
        return matching
    candidates = await all_triggered(rl, definition)
    raise AssertionError(_mismatch(definition.id, payload, filters, count, matching, candidates))


def _expected_fields(filters: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(filters) - FILTERABLE_FIELDS)
    if unknown:
        raise configuration_error(
            f"unknown run field(s) {unknown} to filter on; use any of {sorted(FILTERABLE_FIELDS)}.",
            unknown=unknown,
        )
    return {
        name: value.name if isinstance(value, QueueDef) else value
        for name, value in filters.items()
    }


def _plain(value: Any) -> Any:
    """A pydantic model compares as the JSON it is stored as."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _payload_matches(expected: Any, actual: Any) -> bool:
    if expected is ANY_PAYLOAD:
        return True
    expected = _plain(expected)
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and _payload_matches(value, actual[key])
            for key, value in expected.items()
        )
    if isinstance(expected, Sequence) and not isinstance(expected, str | bytes):
        # JSON has only lists: a tuple in a test matches the list that was stored.
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(_payload_matches(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return bool(expected == actual)


def _mismatch(
    task_id: str,
    payload: Any,
    filters: Mapping[str, Any],
    count: int | None,
    matching: Sequence[Run],
    candidates: Sequence[Run],
) -> str:
    wanted = "at least one run" if count is None else f"{count} run{'s' * (count != 1)}"
    conditions = [] if payload is ANY_PAYLOAD else [f"payload matching {_plain(payload)!r}"]
    conditions += [f"{name}={value!r}" for name, value in _expected_fields(filters).items()]
    where = f" with {' and '.join(conditions)}" if conditions else ""
    lines = [f"expected {wanted} of task {task_id!r}{where}, found {len(matching)}."]
    if not candidates:
        lines.append(f"No run of {task_id!r} exists in this environment.")
    else:
        lines.append(f"Runs of {task_id!r} in this environment ({len(candidates)}):")
        lines += [
            f"  {run.id}  {run.status.value}  queue={run.queue}  payload={run.payload!r}"
            for run in candidates[:SHOWN_CANDIDATES]
        ]
        if len(candidates) > SHOWN_CANDIDATES:
            lines.append(f"  ... and {len(candidates) - SHOWN_CANDIDATES} more")
    return "\n".join(lines)
