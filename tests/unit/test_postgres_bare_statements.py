"""The lone trigger's statements as libpq takes them (storage/postgres/bare.py)."""

from __future__ import annotations

import pytest

from runlane.storage.postgres.bare import BareStatement, _encoded, _types
from runlane.storage.postgres.driver import PostgresStorage


def test_placeholders_are_numbered_in_order_and_a_repeated_name_keeps_its_number() -> None:
    statement = BareStatement.from_query(
        "example", "SELECT %(a)s, %(b)s::json, %(a)s + 1, x %% 7 FROM t WHERE y = %(c)s"
    )
    assert statement.name == b"runlane_example"
    assert statement.text == b"SELECT $1, $2::json, $1 + 1, x % 7 FROM t WHERE y = $3"
    assert statement.params == ("a", "b", "c")


def test_binary_placeholders_are_refused() -> None:
    with pytest.raises(ValueError, match="binary"):
        BareStatement.from_query("example", "SELECT %(ids)b::text[]")


def test_values_are_sent_as_text_and_integers_are_declared_bigint() -> None:
    values = ["é", 12, None, True, False]
    assert _encoded(values, "utf-8") == ["é".encode(), b"12", None, b"t", b"f"]
    assert _types(values) == [0, 20, 0, 16, 16]
    with pytest.raises(TypeError, match="bare statement"):
        _encoded([1.5], "utf-8")


def test_the_lone_trigger_statements_keep_every_parameter_the_driver_sends() -> None:
    storage = PostgresStorage("postgresql://runlane@127.0.0.1:1/none", schema="s")
    for statement in (storage._insert_run, storage._insert_run_handoff):
        text = statement.text.decode()
        assert "%(" not in text and "%%" not in text
        assert '"s".runlane_runs' in text
        assert set(statement.params) >= {"environment", "id", "payload", "now", "channel"}
        for number in range(1, len(statement.params) + 1):
            assert f"${number}" in text
