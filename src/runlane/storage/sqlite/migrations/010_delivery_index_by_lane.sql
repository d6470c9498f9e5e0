-- runlane_runs_undelivered serves only lanes with a transport (tick's requests for
-- deliveries), yet every run of every lane wrote an entry to it and its claim
-- removed the entry again. The schema no longer holds it: a lane with a transport
-- creates it when it opens or migrates (versioning.DELIVERY_INDEX), and keeps it.
DROP INDEX IF EXISTS runlane_runs_undelivered;
