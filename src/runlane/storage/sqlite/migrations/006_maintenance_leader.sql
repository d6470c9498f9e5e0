-- Who leads maintenance in each environment, until when: a holder renews before
-- expires_at, and any contender takes the row once it has passed.
CREATE TABLE IF NOT EXISTS runlane_maintenance_leaders (
    environment TEXT    NOT NULL PRIMARY KEY,
    holder      TEXT    NOT NULL,
    expires_at  INTEGER NOT NULL
) WITHOUT ROWID;
