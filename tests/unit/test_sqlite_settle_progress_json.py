"""The progress a settle carries is written on SQLite as JSON text built in Python
(``progress_json``): it must read back through ``get_progress`` as the value reported,
whatever the message holds and however the fraction prints."""

from __future__ import annotations

import json
import sqlite3

import pytest

from runlane.storage.sql.progress import progress_from_row
from runlane.storage.sqlite.queries import QUERIES
from runlane.storage.sqlite.transitions import progress_json
from runlane.types.clock import from_micros
from runlane.types.records import ProgressWrite

NOW_US = 1_733_300_000_000_001


@pytest.mark.parametrize(
    ("fraction", "message", "data_json"),
    [
        (0.0, None, None),
        (1.0, "done", '{"pages":4}'),
        (-0.0, "", "null"),
        (0.1 + 0.2, 'a "quote", a \\ backslash,\na newline and a\ttab', None),
        (1e-05, "caf\u00e9 \U0001f600 \u2028", '[1,"x",{"a":null}]'),
        (0.5, "controls \x01 \x1f \x7f", '"text"'),
        (1 / 3, "</script>", "12.5"),
    ],
)
def test_the_settles_progress_reads_back_as_reported(
    fraction: float, message: str | None, data_json: str | None
) -> None:
    text = progress_json(ProgressWrite("r", "t", 3, fraction, message, data_json), NOW_US)
    data = None if data_json is None else json.loads(data_json)
    assert json.loads(text) == [3, fraction, message, data, NOW_US]
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute("CREATE TABLE runlane_runs (environment, id, progress)")
    conn.execute("INSERT INTO runlane_runs VALUES ('e', 'r', ?)", (text,))
    (row,) = conn.execute(QUERIES["get_progress"], {"environment": "e", "ids": '["r"]'})
    conn.close()
    stored = progress_from_row(row)
    assert stored.fraction == fraction  # exactly: repr round-trips a float
    assert (stored.message, stored.data, stored.attempt) == (message, data, 3)
    assert stored.updated_at == from_micros(NOW_US)
