"""What the demo saw: attempts, retries, releases and final statuses, per queue."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runlane import QueueStats, Run, RunStatus

_FINAL = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


@dataclass
class QueueTally:
    """Counts for one queue."""

    attempts: int = 0
    retries: int = 0
    releases: int = 0
    statuses: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        """JSON form; every final status present."""
        return {
            "runs": sum(self.statuses.values()),
            **{status.value: self.statuses.get(status.value, 0) for status in _FINAL},
            "attempts": self.attempts,
            "retries": self.retries,
            "releases": self.releases,
        }


@dataclass
class DemoTally:
    """Fed by an observer of the demo's runtime (one call per settled attempt)."""

    queues: defaultdict[str, QueueTally] = field(default_factory=lambda: defaultdict(QueueTally))
    finished: int = 0

    def record(self, run: Run) -> bool:
        """Count one settled attempt; ``True`` when the run reached a final status."""
        entry = self.queues[run.queue]
        entry.attempts += 1
        if run.status is RunStatus.RETRYING:
            entry.retries += 1
        elif run.status is RunStatus.RELEASED:
            entry.releases += 1
        if run.status.is_terminal:
            self.finished += 1
            return True
        return False

    def adopt_final_counts(self, stats: Sequence[QueueStats]) -> None:
        """Take the final statuses from storage (the truth) rather than from callbacks."""
        for entry in stats:
            self.queues[entry.queue].statuses = Counter(
                {status.value: count for status, count in entry.counts.items() if count}
            )

    def totals(self) -> QueueTally:
        """All queues added up."""
        total = QueueTally()
        for entry in self.queues.values():
            total.attempts += entry.attempts
            total.retries += entry.retries
            total.releases += entry.releases
            total.statuses.update(entry.statuses)
        return total
