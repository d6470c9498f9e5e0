-- Schedule state and occurrences (one run per schedule and slot).
-- Parameters are :named.

-- name: get_schedule_states
SELECT schedule_id, last_slot, paused, first_seen FROM runlane_schedules
WHERE environment = :environment;

-- name: mark_schedule_seen
-- Concurrent first ticks: the earliest first-seen point stays.
INSERT INTO runlane_schedules (environment, schedule_id, last_slot, paused, updated_at, first_seen)
VALUES (:environment, :schedule_id, NULL, 0, :now, :now)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET first_seen = min(coalesce(runlane_schedules.first_seen, excluded.first_seen), excluded.first_seen),
        updated_at = excluded.updated_at;

-- name: set_schedule_paused
INSERT INTO runlane_schedules (environment, schedule_id, last_slot, paused, updated_at)
VALUES (:environment, :schedule_id, NULL, :paused, :now)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET paused = excluded.paused, updated_at = excluded.updated_at;

-- name: claim_schedule_occurrence
INSERT INTO runlane_schedule_occurrences (environment, schedule_id, slot, run_id, created_at)
VALUES (:environment, :schedule_id, :slot, :run_id, :now)
ON CONFLICT DO NOTHING
RETURNING run_id;

-- name: advance_schedule
INSERT INTO runlane_schedules (environment, schedule_id, last_slot, paused, updated_at)
VALUES (:environment, :schedule_id, :slot, 0, :now)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET last_slot = max(coalesce(runlane_schedules.last_slot, excluded.last_slot), excluded.last_slot),
        updated_at = excluded.updated_at;
