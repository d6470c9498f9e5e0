-- When a tick first saw each schedule: slots from before then never fire. Rows of
-- schedules that already fired keep NULL (their last_slot says where to go on).
ALTER TABLE {schema}.runlane_schedules ADD COLUMN IF NOT EXISTS first_seen BIGINT;
