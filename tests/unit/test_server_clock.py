"""The server's clock on the host (SPEC-flow 10) and the backoff of failing loops:
plain arithmetic, no database."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from time import monotonic
from zoneinfo import ZoneInfo

import pytest

from runlane.core.backoff import ErrorBackoff
from runlane.storage.postgres.server_time import SKEW_WARNING, ServerTime
from runlane.types.clock import ClockReading, ServerClock

SERVER = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class Monotonic:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_before_a_reading_the_server_clock_is_the_host_clock() -> None:
    clock = ServerClock()
    before = datetime.now(UTC)
    assert before <= clock.now() <= datetime.now(UTC)
    assert clock.offset is None


def test_the_server_clock_runs_on_from_the_reading_with_the_shortest_round_trip() -> None:
    monotonic = Monotonic()
    clock = ServerClock(monotonic)
    slow = ClockReading(sent=90.0, received=94.0, server_now=SERVER + timedelta(hours=1))
    quick = ClockReading(sent=98.0, received=98.2, server_now=SERVER)
    clock.update([slow, quick], host_now=SERVER - timedelta(minutes=10))
    # The reading stands for the midpoint of its round trip (98.1).
    assert clock.now() == SERVER + timedelta(seconds=1.9)
    monotonic.now += 30
    assert clock.now() == SERVER + timedelta(seconds=31.9)
    assert clock.uncertainty == pytest.approx(0.2)


def test_the_offset_is_the_server_time_minus_the_host_time() -> None:
    monotonic = Monotonic()
    clock = ServerClock(monotonic)
    reading = ClockReading(sent=100.0, received=100.0, server_now=SERVER)
    clock.update([reading], host_now=SERVER + timedelta(minutes=10))
    assert clock.offset == pytest.approx(-600)


def test_a_host_clock_stepped_after_the_reading_changes_nothing() -> None:
    monotonic = Monotonic()
    clock = ServerClock(monotonic)
    clock.update([ClockReading(100.0, 100.0, SERVER)], host_now=SERVER)
    monotonic.now += 5
    # Only the monotonic clock counts between readings, whatever the wall clock does.
    assert clock.now() == SERVER + timedelta(seconds=5)


def test_a_server_in_another_time_zone_gives_utc_times_across_a_dst_change() -> None:
    monotonic = Monotonic()
    clock = ServerClock(monotonic)
    berlin = ZoneInfo("Europe/Berlin")
    # The night the clocks in Berlin go forward: 01:30 local is 00:30 UTC.
    server_now = datetime(2030, 3, 31, 1, 30, tzinfo=berlin)
    clock.update([ClockReading(100.0, 100.0, server_now)], host_now=server_now)
    monotonic.now += 7200
    now = clock.now()
    assert now.tzinfo is UTC
    # Two hours on, whatever the wall clock in Berlin did meanwhile.
    assert now == datetime(2030, 3, 31, 2, 30, tzinfo=UTC)


def test_no_readings_keep_the_clock_as_it_was() -> None:
    clock = ServerClock(Monotonic())
    clock.update([])
    assert clock.offset is None


def test_a_host_clock_off_by_more_than_the_tolerance_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time = ServerTime("postgresql db:5432/app (schema runlane)")
    caplog.set_level(logging.WARNING, logger="runlane.postgres")
    for _ in range(3):
        sent = monotonic()
        reading = ClockReading(sent, sent, SERVER)
        time.clock.update([reading], host_now=SERVER + timedelta(minutes=10))
        time._check_skew()
    warnings = [r for r in caplog.records if "clock" in r.getMessage()]
    assert len(warnings) == 1
    assert "600.0 s ahead of the database server's" in warnings[0].getMessage()


def test_a_host_clock_within_the_tolerance_is_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time = ServerTime("postgresql db:5432/app (schema runlane)")
    caplog.set_level(logging.WARNING, logger="runlane.postgres")
    skew = timedelta(seconds=SKEW_WARNING / 2)
    sent = monotonic()
    time.clock.update([ClockReading(sent, sent, SERVER)], host_now=SERVER - skew)
    time._check_skew()
    assert not caplog.records


def test_error_backoff_doubles_with_jitter_up_to_its_cap_and_resets() -> None:
    backoff = ErrorBackoff(initial=0.5, maximum=4.0)
    steps = [0.5, 1.0, 2.0, 4.0, 4.0]
    for step in steps:
        assert step / 2 <= backoff.next_delay() <= step
    backoff.reset()
    assert 0.25 <= backoff.next_delay() <= 0.5
