"""The progress both SQL drivers keep on a run's row (SQLite: one JSON column,
PostgreSQL: ``progress_*`` columns): how a batch of writes is passed to
``write_progress`` and how a ``get_progress`` row becomes a :class:`RunProgress`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from runlane.storage.sql.encoding import load_json
from runlane.types.clock import from_micros
from runlane.types.records import ProgressWrite
from runlane.types.runs import RunProgress


def progress_writes_json(writes: Sequence[ProgressWrite]) -> str:
    """``writes`` as the one JSON parameter ``write_progress`` reads in both dialects
    (SQLite's ``json_each``, PostgreSQL's ``jsonb_to_recordset``); the last value of a
    run wins, since one statement may not change a row twice."""
    latest = {write.run_id: write for write in writes}
    return json.dumps(
        [
            {
                "id": write.run_id,
                "token": write.lease_token,
                "attempt": write.attempt,
                "fraction": write.fraction,
                "message": write.message,
                "data": write.data_json,
            }
            for write in latest.values()
        ],
        ensure_ascii=False,
    )


def progress_from_row(row: Any) -> RunProgress:
    """A ``get_progress`` row as the run's :class:`RunProgress`."""
    data = row["data"]
    return RunProgress(
        fraction=float(row["fraction"]),
        message=row["message"],
        data=None if data is None else load_json(data),
        attempt=int(row["attempt"]),
        updated_at=from_micros(int(row["updated_at"])),
    )
