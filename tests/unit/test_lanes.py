"""Lane builders: where each lane keeps its truth."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from runlane import RunlaneError, sqlite_lane


def test_a_relative_sqlite_path_is_made_absolute_where_the_lane_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    lane = sqlite_lane("var/app.db")
    monkeypatch.chdir(tmp_path.parent)  # a later change of directory changes nothing

    assert lane.location == str(tmp_path / "var" / "app.db")
    assert lane.storage.path == lane.location  # type: ignore[attr-defined]


def test_an_in_memory_sqlite_lane_stays_in_memory() -> None:
    assert sqlite_lane(":memory:").location == ":memory:"


def test_lane_option_types_name_exactly_what_the_drivers_take() -> None:
    from runlane.lanes import PostgresOptions, SqliteOptions
    from runlane.storage.postgres import PostgresStorage
    from runlane.storage.sqlite import SqliteStorage

    for options, driver, target in (
        (SqliteOptions, SqliteStorage, "path"),
        (PostgresOptions, PostgresStorage, "dsn"),
    ):
        # SQLite's ``deliveries`` follows the lane's transport: the builder sets it.
        taken = set(inspect.signature(driver).parameters) - {target, "deliveries"}
        assert set(options.__annotations__) == taken, driver


def test_a_sqlite_lane_keeps_the_delivery_index_only_with_a_transport(tmp_path: Path) -> None:
    assert sqlite_lane(tmp_path / "a.db").storage._deliveries is False  # type: ignore[attr-defined]
    with_transport = sqlite_lane(tmp_path / "b.db", transport=object()).storage
    assert with_transport._deliveries is True  # type: ignore[attr-defined]
    with pytest.raises(RunlaneError, match="does not take"):
        sqlite_lane(tmp_path / "c.db", deliveries=True)  # type: ignore[call-arg]
