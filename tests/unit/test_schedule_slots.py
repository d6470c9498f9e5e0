"""Schedule slot arithmetic: `every` multiples since the epoch, cron in wall-clock time
across daylight saving, one-off run_at, and how many missed slots a tick catches up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

from hypothesis import example, given, settings
from hypothesis import strategies as st

from runlane import ScheduleDef, schedule
from runlane.model.schedule_defs import MAX_CATCH_UP_SLOTS

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")
# 2024 in Europe/Berlin: clocks jump 02:00 → 03:00 on 31 March and 03:00 → 02:00 on
# 27 October (both transitions happen at 01:00 UTC).
SPRING_FORWARD = datetime(2024, 3, 31, tzinfo=BERLIN)
FALL_BACK = datetime(2024, 10, 27, tzinfo=BERLIN)
TRANSITION_UTC_HOUR = 1


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def berlin_cron(expression: str, *, catch_up: bool = True) -> ScheduleDef:
    return schedule("s", cron=expression, timezone="Europe/Berlin", catch_up=catch_up)


def slots_around(definition: ScheduleDef, day: datetime) -> list[datetime]:
    """Every slot from three days before ``day`` to three days after it."""
    return definition.slots_between(day - timedelta(days=3), day + timedelta(days=3))


def local_dates(slots: list[datetime]) -> list[str]:
    return [slot.astimezone(BERLIN).date().isoformat() for slot in slots]


# -- every -----------------------------------------------------------------------------


def test_every_slots_are_multiples_of_the_interval_since_the_unix_epoch() -> None:
    quarter = schedule("s", every="15m")
    assert quarter.latest_slot_at_or_before(utc(2030, 1, 1, 12, 7, 30)) == utc(2030, 1, 1, 12)
    assert quarter.next_slot_after(utc(2030, 1, 1, 12, 7, 30)) == utc(2030, 1, 1, 12, 15)


def test_every_slots_do_not_snap_to_the_hour_when_the_interval_does_not_divide_it() -> None:
    seven = schedule("s", every="7m")
    latest = seven.latest_slot_at_or_before(utc(2030, 1, 1, 12))
    assert latest is not None
    assert (latest - EPOCH) % timedelta(minutes=7) == timedelta(0)
    assert utc(2030, 1, 1, 11, 53) < latest <= utc(2030, 1, 1, 12)


def test_a_slot_exactly_at_the_moment_is_the_latest_and_the_next_one_is_strictly_later() -> None:
    hourly = schedule("s", every="1h")
    assert hourly.latest_slot_at_or_before(utc(2030, 1, 1, 12)) == utc(2030, 1, 1, 12)
    assert hourly.next_slot_after(utc(2030, 1, 1, 12)) == utc(2030, 1, 1, 13)


def test_no_slot_at_or_before_the_starting_point_is_due_even_with_catch_up() -> None:
    hourly = schedule("s", every="1h", catch_up=True)
    assert hourly.slots_between(utc(2030, 1, 1, 12, 30), utc(2030, 1, 1, 12, 59)) == []
    assert hourly.slots_between(utc(2030, 1, 1, 12), utc(2030, 1, 1, 12, 30)) == []
    assert hourly.slots_between(utc(2030, 1, 1, 12, 30), utc(2030, 1, 1, 13)) == [
        utc(2030, 1, 1, 13)
    ]


def test_without_catch_up_only_the_latest_missed_slot_is_returned() -> None:
    hourly = schedule("s", every="1h")
    slots = hourly.slots_between(utc(2030, 1, 1, 0, 0), utc(2030, 1, 1, 12, 30))
    assert slots == [utc(2030, 1, 1, 12)]


def test_with_catch_up_every_missed_slot_is_returned_oldest_first() -> None:
    hourly = schedule("s", every="1h", catch_up=True)
    slots = hourly.slots_between(utc(2030, 1, 1, 9), utc(2030, 1, 1, 12, 30))
    assert slots == [utc(2030, 1, 1, 10), utc(2030, 1, 1, 11), utc(2030, 1, 1, 12)]


def test_catch_up_is_bounded_to_the_most_recent_slots() -> None:
    minutely = schedule("s", every="1m", catch_up=True)
    until = utc(2030, 1, 1, 12)
    slots = minutely.slots_between(until - timedelta(days=1), until)
    assert len(slots) == MAX_CATCH_UP_SLOTS
    assert slots[-1] == until
    assert slots[0] == until - timedelta(minutes=MAX_CATCH_UP_SLOTS - 1)
    assert slots == sorted(slots)


def test_nothing_is_due_when_the_latest_slot_was_already_materialised() -> None:
    for catch_up in (False, True):
        hourly = schedule("s", every="1h", catch_up=catch_up)
        assert hourly.slots_between(utc(2030, 1, 1, 12), utc(2030, 1, 1, 12, 59)) == []


@settings(max_examples=200)
@given(
    every_seconds=st.integers(min_value=1, max_value=2 * 86400),
    moment=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
    missed=st.integers(min_value=0, max_value=300),
)
def test_every_slots_are_aligned_strictly_increasing_and_inside_the_window(
    every_seconds: int, moment: datetime, missed: int
) -> None:
    definition = schedule("s", every=every_seconds, catch_up=True)
    step = timedelta(seconds=every_seconds)
    after = moment - step * missed
    slots = definition.slots_between(after, moment)
    assert all((slot - EPOCH) % step == timedelta(0) for slot in slots)
    assert all(earlier < later for earlier, later in pairwise(slots))
    assert all(after < slot <= moment for slot in slots)
    assert len(slots) == min(missed, MAX_CATCH_UP_SLOTS)


@given(
    every_seconds=st.integers(min_value=1, max_value=7 * 86400),
    moment=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
)
def test_every_moment_lies_between_the_latest_slot_and_the_next_one(
    every_seconds: int, moment: datetime
) -> None:
    definition = schedule("s", every=every_seconds)
    latest = definition.latest_slot_at_or_before(moment)
    upcoming = definition.next_slot_after(moment)
    assert latest is not None and upcoming is not None
    assert latest <= moment < upcoming
    assert upcoming - latest == timedelta(seconds=every_seconds)


# -- run_at ----------------------------------------------------------------------------


def test_a_one_off_schedule_is_due_once_its_time_has_come() -> None:
    once = schedule("once", run_at=utc(2030, 1, 1, 12))
    seen = utc(2030, 1, 1, 11)
    assert once.slots_between(seen, utc(2030, 1, 1, 11, 59)) == []
    assert once.slots_between(seen, utc(2030, 1, 1, 12)) == [utc(2030, 1, 1, 12)]
    assert once.slots_between(seen, utc(2031, 1, 1)) == [utc(2030, 1, 1, 12)]


def test_a_one_off_schedule_first_seen_after_its_time_is_never_due() -> None:
    once = schedule("once", run_at=utc(2030, 1, 1, 12))
    assert once.slots_between(utc(2030, 1, 1, 12, 5), utc(2031, 1, 1)) == []


def test_a_one_off_schedule_is_not_due_again_after_it_was_materialised() -> None:
    once = schedule("once", run_at=utc(2030, 1, 1, 12))
    assert once.slots_between(utc(2030, 1, 1, 12), utc(2031, 1, 1)) == []


def test_a_one_off_schedule_has_a_next_fire_time_only_before_it_fired() -> None:
    once = schedule("once", run_at=utc(2030, 1, 1, 12))
    assert once.next_slot_after(utc(2030, 1, 1)) == utc(2030, 1, 1, 12)
    assert once.next_slot_after(utc(2030, 1, 1, 12)) is None
    assert once.latest_slot_at_or_before(utc(2030, 1, 1)) is None


# -- cron ------------------------------------------------------------------------------


def test_cron_slots_in_utc_follow_the_expression() -> None:
    nightly = schedule("s", cron="0 3 * * *", catch_up=True)
    slots = nightly.slots_between(utc(2030, 1, 1), utc(2030, 1, 4))
    assert slots == [utc(2030, 1, 1, 3), utc(2030, 1, 2, 3), utc(2030, 1, 3, 3)]
    assert nightly.next_slot_after(utc(2030, 1, 3, 3)) == utc(2030, 1, 4, 3)


def test_cron_fires_at_local_wall_time_in_its_timezone() -> None:
    nightly = berlin_cron("0 3 * * *")
    winter = nightly.latest_slot_at_or_before(utc(2030, 1, 15, 12))
    summer = nightly.latest_slot_at_or_before(utc(2030, 7, 15, 12))
    assert winter == utc(2030, 1, 15, 2)
    assert summer == utc(2030, 7, 15, 1)


def test_daily_cron_fires_once_per_day_across_spring_forward() -> None:
    slots = slots_around(berlin_cron("0 3 * * *"), SPRING_FORWARD)
    assert local_dates(slots) == [
        "2024-03-28",
        "2024-03-29",
        "2024-03-30",
        "2024-03-31",
        "2024-04-01",
        "2024-04-02",
    ]
    assert all(slot.astimezone(BERLIN).hour == 3 for slot in slots)
    assert utc(2024, 3, 31, 1) in slots  # 03:00 CEST, just after the jump


def test_daily_cron_fires_once_per_day_across_fall_back() -> None:
    slots = slots_around(berlin_cron("0 3 * * *"), FALL_BACK)
    assert local_dates(slots) == [
        "2024-10-24",
        "2024-10-25",
        "2024-10-26",
        "2024-10-27",
        "2024-10-28",
        "2024-10-29",
    ]
    assert all(slot.astimezone(BERLIN).hour == 3 for slot in slots)
    assert utc(2024, 10, 27, 2) in slots  # 03:00 CET, after the clocks went back


def test_a_wall_time_skipped_by_spring_forward_fires_once_that_day() -> None:
    slots = slots_around(berlin_cron("30 2 * * *"), SPRING_FORWARD)
    assert local_dates(slots).count("2024-03-31") == 1
    assert len(slots) == len(set(local_dates(slots))) == 6


def test_a_wall_time_skipped_by_spring_forward_fires_after_the_clocks_jump() -> None:
    # 02:30 does not exist on 31 March; the run must not come early (01:30 CET, still
    # before the jump) but when the clock has passed 02:30, i.e. from 03:00 CEST on.
    slots = slots_around(berlin_cron("30 2 * * *"), SPRING_FORWARD)
    (that_day,) = [slot for slot in slots if local_dates([slot]) == ["2024-03-31"]]
    jump = utc(2024, 3, 31, TRANSITION_UTC_HOUR)
    assert jump <= that_day <= jump + timedelta(minutes=30)


def test_a_wall_time_repeated_by_fall_back_fires_once_at_its_first_occurrence() -> None:
    slots = slots_around(berlin_cron("30 2 * * *"), FALL_BACK)
    assert local_dates(slots).count("2024-10-27") == 1
    assert len(slots) == len(set(local_dates(slots))) == 6
    assert utc(2024, 10, 27, 0, 30) in slots  # 02:30 CEST, the first of the two
    assert utc(2024, 10, 27, 1, 30) not in slots  # 02:30 CET, the repeat


def test_catch_up_across_spring_forward_returns_each_instant_once() -> None:
    half_hourly = berlin_cron("*/30 * * * *")
    slots = half_hourly.slots_between(utc(2024, 3, 30, 23), utc(2024, 3, 31, 2))
    assert len(slots) == len(set(slots))
    assert all(earlier < later for earlier, later in pairwise(slots))


def test_catch_up_across_fall_back_fires_each_wall_time_once() -> None:
    half_hourly = berlin_cron("*/30 * * * *")
    slots = half_hourly.slots_between(utc(2024, 10, 26, 23), utc(2024, 10, 27, 3))
    walls = [slot.astimezone(BERLIN).strftime("%H:%M") for slot in slots]
    assert walls == ["01:30", "02:00", "02:30", "03:00", "03:30", "04:00"]


def test_the_latest_slot_during_the_repeated_hour_is_the_one_that_already_fired() -> None:
    # 01:15 UTC on 27 October is 02:15 CET, the second pass through 02:xx; the 02:30
    # slot already fired at 02:30 CEST (00:30 UTC) and is the latest one.
    nightly = berlin_cron("30 2 * * *")
    assert nightly.latest_slot_at_or_before(utc(2024, 10, 27, 1, 15)) == utc(2024, 10, 27, 0, 30)


def test_next_fire_times_walk_the_same_slots_as_catch_up() -> None:
    for expression in ("0 3 * * *", "30 2 * * *", "*/30 * * * *"):
        definition = berlin_cron(expression)
        for day in (SPRING_FORWARD, FALL_BACK):
            start, end = day - timedelta(days=1), day + timedelta(days=1)
            walked, moment = [], start
            while (upcoming := definition.next_slot_after(moment)) and upcoming <= end:
                walked.append(upcoming)
                moment = upcoming
            assert walked == definition.slots_between(start, end), (expression, day)


def test_without_catch_up_cron_returns_only_the_latest_missed_slot() -> None:
    nightly = berlin_cron("0 3 * * *", catch_up=False)
    slots = nightly.slots_between(utc(2030, 1, 1), utc(2030, 1, 10, 12))
    assert slots == [utc(2030, 1, 10, 2)]


def test_cron_catch_up_is_bounded_to_the_most_recent_slots() -> None:
    every_minute = schedule("s", cron="* * * * *", catch_up=True)
    until = utc(2030, 1, 1, 12)
    slots = every_minute.slots_between(until - timedelta(days=2), until)
    assert len(slots) == MAX_CATCH_UP_SLOTS
    assert slots[-1] == until
    assert slots == sorted(slots)


_CRONS = ["0 3 * * *", "30 2 * * *", "0 2 * * *", "15 * * * *", "*/30 * * * *", "0 0 * * 0"]


@settings(max_examples=150, deadline=None)
@given(
    expression=st.sampled_from(_CRONS),
    moment=st.datetimes(
        min_value=datetime(2024, 1, 1), max_value=datetime(2025, 12, 31), timezones=st.just(UTC)
    ),
)
@example(expression="30 2 * * *", moment=utc(2024, 3, 31, 0, 45))
@example(expression="0 2 * * *", moment=utc(2024, 3, 31, 0, 30))
@example(expression="30 2 * * *", moment=utc(2024, 10, 27, 1, 15))
def test_cron_latest_and_next_slots_bracket_every_moment_with_nothing_in_between(
    expression: str, moment: datetime
) -> None:
    definition = berlin_cron(expression)
    latest = definition.latest_slot_at_or_before(moment)
    upcoming = definition.next_slot_after(moment)
    assert latest is not None and upcoming is not None
    assert latest <= moment < upcoming
    assert definition.next_slot_after(latest) == upcoming
