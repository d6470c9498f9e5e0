"""Batch request bookkeeping shared by SendMessageBatch and DeleteMessageBatch.

SQS answers a batch call with ``Successful[]`` and ``Failed[]`` entries keyed by
the request's entry ids. Outcomes are only trustworthy when every id comes back
exactly once; anything else is an operation-level contract violation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from runlane.types.errors import ErrorCode, RunlaneError

#: SQS accepts at most this many entries per batch request (send, delete, receive).
SQS_MAX_BATCH_ENTRIES = 10

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BatchEntryResult:
    """What SQS said about one entry of a batch request."""

    entry_id: str
    succeeded: bool
    entry: Mapping[str, Any]

    @property
    def provider_code(self) -> str | None:
        """The provider's error code of a failed entry."""
        code = self.entry.get("Code")
        return str(code) if code is not None else None

    @property
    def sender_fault(self) -> bool:
        """Whether SQS blames the request (retrying the same entry will not help)."""
        return bool(self.entry.get("SenderFault"))


def chunked(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Consecutive slices of at most ``size`` items, in order."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def match_batch_entries(
    entry_ids: Sequence[str], response: Mapping[str, Any], *, operation: str, **meta: Any
) -> dict[str, BatchEntryResult]:
    """Map each requested entry id to its result, or raise ``ADAPTER_CONTRACT_VIOLATION``.

    >>> match_batch_entries(["0"], {"Successful": [{"Id": "0"}]}, operation="SendMessageBatch")
    {'0': BatchEntryResult(entry_id='0', succeeded=True, entry={'Id': '0'})}
    """
    requested = set(entry_ids)
    results: dict[str, BatchEntryResult] = {}
    problems: list[str] = []
    for key, succeeded in (("Successful", True), ("Failed", False)):
        for entry in response.get(key) or ():
            entry_id = entry.get("Id") if isinstance(entry, Mapping) else None
            if entry_id not in requested:
                problems.append(f"unknown entry id {entry_id!r}")
            elif entry_id in results:
                problems.append(f"entry id {entry_id!r} answered twice")
            else:
                results[entry_id] = BatchEntryResult(entry_id, succeeded, entry)
    missing = [entry_id for entry_id in entry_ids if entry_id not in results]
    if missing:
        problems.append(f"no result for entry ids {missing}")
    if problems:
        raise RunlaneError(
            ErrorCode.ADAPTER_CONTRACT_VIOLATION,
            f"SQS {operation} answered with entries that do not match the request, so "
            "per-entry outcomes cannot be trusted; the whole call counts as failed.",
            meta={"operation": operation, "problems": problems[:10], **meta},
        )
    return results
