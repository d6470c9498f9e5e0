"""The dashboard's pure helpers: which actions a run offers, time hints, display JSON."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runlane import RunStatus
from runlane.dashboard.routes.run_detail import allowed_actions
from runlane.dashboard.templates import compact_json, relative, short_time

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "actions"),
    [
        (RunStatus.QUEUED, ["cancel"]),
        (RunStatus.SCHEDULED, ["cancel"]),
        (RunStatus.RUNNING, ["cancel"]),
        (RunStatus.RETRYING, ["cancel"]),
        (RunStatus.RELEASED, ["cancel"]),
        (RunStatus.CANCELLATION_REQUESTED, []),
        (RunStatus.SUCCEEDED, ["rerun"]),
        (RunStatus.FAILED, ["retry", "rerun"]),
        (RunStatus.CANCELLED, ["rerun"]),
    ],
)
def test_a_run_offers_exactly_the_actions_the_operator_api_accepts(
    status: RunStatus, actions: list[str]
) -> None:
    assert allowed_actions(status.value) == actions


@pytest.mark.parametrize(
    ("moment", "hint"),
    [
        ("2026-12-01T11:59:58+00:00", "2s ago"),
        ("2026-12-01T11:55:00+00:00", "5m ago"),
        ("2026-12-01T09:00:00+00:00", "3h ago"),
        ("2026-11-29T12:00:00+00:00", "2d ago"),
        ("2026-12-01T12:00:30+00:00", "in 30s"),
        ("2026-12-01T13:00:00+01:00", "0s ago"),
    ],
)
def test_times_get_a_relative_hint(moment: str, hint: str) -> None:
    assert relative(moment, NOW) == hint


def test_times_show_in_utc_and_missing_times_as_a_dash() -> None:
    assert short_time("2026-12-01T13:00:00+01:00") == "2026-12-01 12:00:00Z"
    assert short_time(None) == "-" and relative(None, NOW) == ""


def test_event_data_shows_strings_bare_and_everything_else_as_json() -> None:
    assert compact_json("worker-1") == "worker-1"
    assert compact_json({"b": 1, "a": "<x>"}) == '{"a": "<x>", "b": 1}'
    assert compact_json(None) == "null"


def test_a_missing_extra_is_a_configuration_error_naming_the_install_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from runlane import ErrorCode, RunlaneError
    from runlane.dashboard import requirements

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "uvicorn" else real_find_spec(name, *args),
    )

    with pytest.raises(RunlaneError) as raised:
        requirements.require_extra()
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert "pip install 'runlane[dashboard]'" in raised.value.message
    assert raised.value.meta == {"missing": ["uvicorn"]}
