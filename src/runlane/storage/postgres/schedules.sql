-- Schedule state and occurrences (one run per schedule and slot).
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: get_schedule_states
SELECT schedule_id, last_slot, paused, first_seen FROM {schema}.runlane_schedules
WHERE environment = %(environment)s;

-- name: mark_schedule_seen
-- Concurrent first ticks: the earliest first-seen point stays.
INSERT INTO {schema}.runlane_schedules AS s
    (environment, schedule_id, last_slot, paused, updated_at, first_seen)
VALUES (%(environment)s, %(schedule_id)s, NULL, false, %(now)s, %(now)s)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET first_seen = least(s.first_seen, excluded.first_seen),
        updated_at = excluded.updated_at;

-- name: set_schedule_paused
INSERT INTO {schema}.runlane_schedules AS s (environment, schedule_id, last_slot, paused, updated_at)
VALUES (%(environment)s, %(schedule_id)s, NULL, %(paused)s, %(now)s)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET paused = excluded.paused, updated_at = excluded.updated_at;

-- name: claim_schedule_occurrence
-- The occurrence id is (schedule, slot): a concurrent tick claiming the same slot
-- waits for this one and then claims nothing.
INSERT INTO {schema}.runlane_schedule_occurrences (
    environment, schedule_id, slot, run_id, created_at
)
VALUES (%(environment)s, %(schedule_id)s, %(slot)s, %(run_id)s, %(now)s)
ON CONFLICT DO NOTHING
RETURNING run_id;

-- name: advance_schedule
INSERT INTO {schema}.runlane_schedules AS s (environment, schedule_id, last_slot, paused, updated_at)
VALUES (%(environment)s, %(schedule_id)s, %(slot)s, false, %(now)s)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET last_slot = greatest(s.last_slot, excluded.last_slot),
        updated_at = excluded.updated_at;
