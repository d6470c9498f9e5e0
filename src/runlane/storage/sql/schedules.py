"""Parameters of the schedule statements, the same on every dialect.

Which slots are due and the key each gets are core's (``runlane.model.schedule_defs``);
a driver only claims the occurrences it is handed, so all it shares is these names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runlane.types.clock import to_micros
from runlane.types.records import ScheduleOccurrence


def occurrence_scope(
    environment: str, occurrence: ScheduleOccurrence, now_us: int
) -> dict[str, Any]:
    """Parameters of ``advance_schedule``; ``claim_schedule_occurrence`` adds ``run_id``."""
    return {
        "environment": environment,
        "schedule_id": occurrence.schedule_id,
        "slot": to_micros(occurrence.slot),
        "now": now_us,
    }


def seen_params(environment: str, schedule_ids: Sequence[str], now_us: int) -> list[dict[str, Any]]:
    """Parameters of ``mark_schedule_seen``, one set per schedule."""
    return [{"environment": environment, "schedule_id": sid, "now": now_us} for sid in schedule_ids]
