-- The throughput rollup (runlane_throughput): adding what attempts did, reading it
-- back per bar. Parameters are :named; minutes are microseconds since the epoch.

-- name: record_throughput
-- :rows is a JSON array of [queue, minute, series, count]; counts add up.
INSERT INTO runlane_throughput (environment, queue, minute, series, n)
SELECT :environment, json_extract(value, '$[0]'), json_extract(value, '$[1]'),
       json_extract(value, '$[2]'), json_extract(value, '$[3]')
FROM json_each(:rows) WHERE true
ON CONFLICT (environment, queue, minute, series) DO UPDATE SET n = n + excluded.n;

-- name: prune_throughput
DELETE FROM runlane_throughput WHERE environment = :environment AND minute < :before;

-- name: read_queue_throughput
-- One queue: a range of its primary key, summed per bar of :bucket microseconds.
SELECT queue, :since + ((minute - :since) / :bucket) * :bucket AS period, series, sum(n) AS n
FROM runlane_throughput
WHERE environment = :environment AND queue = :queue AND minute >= :since
GROUP BY period, series;

-- name: read_throughput
-- Every queue together: a range of runlane_throughput_by_minute.
SELECT '' AS queue, :since + ((minute - :since) / :bucket) * :bucket AS period, series,
       sum(n) AS n
FROM runlane_throughput
WHERE environment = :environment AND minute >= :since
GROUP BY period, series;
