-- When a tick first saw each schedule: slots from before then never fire. Rows of
-- schedules that already fired keep NULL (their last_slot says where to go on).
ALTER TABLE runlane_schedules ADD COLUMN first_seen INTEGER;
