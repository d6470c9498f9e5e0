"""Applying state transitions: compare-and-set each run, then append its events."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from runlane.storage.protocol import Transition
from runlane.storage.sqlite.params import transition_events, transition_params
from runlane.storage.sqlite.queries import QUERIES


def apply_transitions(
    cur: sqlite3.Cursor, environment: str, transitions: Sequence[Transition], now_us: int
) -> list[bool]:
    """Compare-and-set each transition; the events of the applied ones go in one batch."""
    query = QUERIES["apply_transition"]
    applied: list[bool] = []
    events: list[dict[str, Any]] = []
    for transition in transitions:
        ok = cur.execute(query, transition_params(environment, transition, now_us)).rowcount == 1
        applied.append(ok)
        if ok:
            events += transition_events(environment, transition, now_us)
    cur.executemany(QUERIES["insert_event"], events)
    return applied
