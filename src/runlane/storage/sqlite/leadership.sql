-- The maintenance lead: one holder per environment at a time.
-- Parameters are :named.

-- name: hold_maintenance_lead
-- Taken when free or expired, renewed by its holder; a row comes back only then.
INSERT INTO runlane_maintenance_leaders (environment, holder, expires_at)
VALUES (:environment, :holder, :expires_at)
ON CONFLICT (environment) DO UPDATE
    SET holder = excluded.holder, expires_at = excluded.expires_at
    WHERE runlane_maintenance_leaders.holder = excluded.holder
       OR runlane_maintenance_leaders.expires_at <= :now
RETURNING holder;

-- name: release_maintenance_lead
DELETE FROM runlane_maintenance_leaders WHERE environment = :environment AND holder = :holder;
