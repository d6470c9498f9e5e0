-- The throughput rollup (runlane_throughput): adding what attempts did, reading it
-- back per bar. Parameters are %(named)s; minutes are microseconds since the epoch.

-- name: record_throughput
-- %(rows)s is a JSON array of [queue, minute, series, count]; counts add up. Sorted,
-- so two writers take the row locks in one order and never deadlock.
INSERT INTO {schema}.runlane_throughput AS t (environment, queue, minute, series, n)
SELECT %(environment)s, r ->> 0, (r ->> 1)::bigint, r ->> 2, (r ->> 3)::bigint
FROM jsonb_array_elements(%(rows)s::jsonb) AS r
ORDER BY 2, 3, 4
ON CONFLICT (environment, queue, minute, series) DO UPDATE SET n = t.n + excluded.n;

-- name: prune_throughput
DELETE FROM {schema}.runlane_throughput
WHERE environment = %(environment)s AND minute < %(before)s;

-- name: read_queue_throughput
-- One queue: a range of its primary key, summed per bar of %(bucket)s microseconds.
SELECT queue, %(since)s + ((minute - %(since)s) / %(bucket)s) * %(bucket)s AS period, series,
       sum(n) AS n
FROM {schema}.runlane_throughput
WHERE environment = %(environment)s AND queue = %(queue)s AND minute >= %(since)s
GROUP BY queue, period, series;

-- name: read_throughput
-- Every queue together: a range of runlane_throughput_by_minute.
SELECT '' AS queue, %(since)s + ((minute - %(since)s) / %(bucket)s) * %(bucket)s AS period,
       series, sum(n) AS n
FROM {schema}.runlane_throughput
WHERE environment = %(environment)s AND minute >= %(since)s
GROUP BY period, series;
