-- Claims of the SQLite driver, each a whole statement: lease the runs it chooses
-- and return them (their run.started is implied by the row's started_* columns).
-- Callers hold the write lock (IMMEDIATE transactions), so a bounded queue's count
-- and a key's deliveries cannot change under them. All claims lease alike; only the
-- choice of runs differs.
--
-- Key rules (contract 5.7), for deliveries with a partition key (task runs and NONE
-- deliveries have none, and skip them): EXCLUSIVE, no delivery of the same
-- (task_id, partition_key) holds an unexpired lease; ORDERED, also no delivery of
-- it with a lower sequence is unfinished. One claim takes at most one delivery per
-- key. The keyed scans name the partial runlane_runs_keyed index (their status
-- lists spelled as its own, so SQLite can use it): holding no task run, it keeps
-- those scans empty on a lane of tasks, however long its queue.

-- name: claim_due_runs
-- One queue: the first due runs without a key in claim order (claim_at, the due time
-- less the run's priority offset, migration 014), and the first claimable delivery
-- of each key, merged by claim_at. A due run's claim_at is at most :horizon (now
-- plus the widest priority window of the queues claimed: the offset of the lowest
-- priority), which ends the ordered scan of runlane_runs_claim_order; run_at <= :now
-- keeps runs that are not due yet out, whatever their priority.
UPDATE runlane_runs
SET status = 'running',
    attempt = attempt + 1,
    event_sequence = event_sequence + 1,
    lease_owner = :worker_id,
    lease_token = :lease_token,
    lease_expires_at = :lease_expires_at,
    reserved_until = NULL,
    updated_at = :now,
    -- run.started is implied by these (migration 016).
    started_sequence = event_sequence + 1,
    started_at = :now,
    started_by = :worker_id,
    started_lease_expires_at = :lease_expires_at
WHERE environment = :environment
  -- A queue paused by any process is left out from the pause's commit on.
  AND NOT EXISTS (
      SELECT 1 FROM runlane_queue_pauses p
      WHERE p.environment = :environment AND p.queue = runlane_runs.queue
  )
  AND id IN (
    SELECT id FROM (
        SELECT id, claim_at FROM (
            SELECT id, claim_at FROM runlane_runs INDEXED BY runlane_runs_claim_order
            WHERE environment = :environment
              AND queue = :queue
              AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
                   OR status = 'released')
              AND claim_at <= :horizon
              AND run_at <= :now
              AND partition_key IS NULL
            ORDER BY claim_at, id
            LIMIT :limit
        )
        UNION ALL
        SELECT f.id, f.claim_at FROM (
            SELECT k.id, k.claim_at, k.task_id, k.partition_key,
                   row_number() OVER (
                       PARTITION BY k.task_id, k.partition_key ORDER BY k.run_at, k.id
                   ) AS rank_in_key
            FROM runlane_runs k INDEXED BY runlane_runs_keyed
            WHERE k.environment = :environment
              AND k.partition_key IS NOT NULL
              AND (k.status = 'queued' OR k.status = 'scheduled' OR k.status = 'retrying'
                   OR k.status = 'released' OR k.status = 'running'
                   OR k.status = 'cancellation_requested' OR k.status = 'dead_lettered')
              AND (k.status = 'queued' OR k.status = 'scheduled' OR k.status = 'retrying'
                   OR k.status = 'released')
              AND k.queue = :queue
              AND k.run_at <= :now
              -- ORDERED: the key's head (no unfinished delivery before it).
              AND (k.subscription_mode <> 'ordered' OR NOT EXISTS (
                  SELECT 1 FROM runlane_runs o
                  WHERE o.environment = k.environment AND o.task_id = k.task_id
                    AND o.partition_key = k.partition_key
                    AND (o.status = 'queued' OR o.status = 'scheduled'
                         OR o.status = 'retrying' OR o.status = 'released'
                         OR o.status = 'running' OR o.status = 'cancellation_requested'
                         OR o.status = 'dead_lettered')
                    AND o.message_sequence < k.message_sequence
              ))
        ) f
        WHERE f.rank_in_key = 1
          -- No delivery of the key holds an unexpired lease.
          AND NOT EXISTS (
              SELECT 1 FROM runlane_runs o
              WHERE o.environment = :environment AND o.task_id = f.task_id
                AND o.partition_key = f.partition_key
                AND (o.status = 'queued' OR o.status = 'scheduled' OR o.status = 'retrying'
                     OR o.status = 'released' OR o.status = 'running'
                     OR o.status = 'cancellation_requested' OR o.status = 'dead_lettered')
                AND (o.status = 'running' OR o.status = 'cancellation_requested')
                AND o.lease_expires_at > :now
          )
    )
    ORDER BY claim_at, id
    LIMIT :limit
)
-- The columns a run is built from (rows.RUN_COLUMNS), not the bookkeeping ones:
-- sqlite3 converts every column returned, one call into SQLite each.
RETURNING id, environment, task_id, queue, status, payload, attempt, failure_count, run_at,
          created_at, updated_at, event_sequence, source, result, failure, idempotency_key,
          singleton_key, concurrency_key, trace_carrier, lease_owner, lease_token,
          lease_expires_at, cancel_reason, partition_key, replays, subscription_mode,
          message_sequence, dead_letter_reason, dead_lettered_at, rate_key, priority;

-- name: partitioned_queues
-- Of the bounded queues (:bounded), those that have held a run with a concurrency key.
SELECT queue FROM runlane_partitioned_queues
WHERE environment = :environment
  AND queue IN (SELECT json_extract(value, '$[0]') FROM json_each(:bounded));

-- name: first_due_runs
-- A queue of one partition: its first due runs in claim order, as many as its limit.
SELECT id FROM runlane_runs INDEXED BY runlane_runs_claim_order
WHERE environment = :environment
  AND queue = :queue
  AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
       OR status = 'released')
  AND claim_at <= :horizon
  AND run_at <= :now
  AND partition_key IS NULL
ORDER BY claim_at, id
LIMIT :take;

-- name: claim_bounded_runs
-- Bounded queues: per (queue, concurrency key) partition, claim at most the limit
-- minus the runs that hold an active lease, first in claim order (claim_at); of a
-- partition key, at most its first claimable delivery.
UPDATE runlane_runs
SET status = 'running',
    attempt = attempt + 1,
    event_sequence = event_sequence + 1,
    lease_owner = :worker_id,
    lease_token = :lease_token,
    lease_expires_at = :lease_expires_at,
    reserved_until = NULL,
    updated_at = :now,
    -- run.started is implied by these (migration 016).
    started_sequence = event_sequence + 1,
    started_at = :now,
    started_by = :worker_id,
    started_lease_expires_at = :lease_expires_at
WHERE environment = :environment
  -- A queue paused by any process is left out from the pause's commit on.
  AND NOT EXISTS (
      SELECT 1 FROM runlane_queue_pauses p
      WHERE p.environment = :environment AND p.queue = runlane_runs.queue
  )
  AND id IN (
    SELECT c.id FROM (
        SELECT e.id, e.queue, e.claim_at, e.lim, e.part,
               row_number() OVER (PARTITION BY e.queue, e.part ORDER BY e.claim_at, e.id) AS rn
        FROM (
            -- Partitioned queues (:ranked, migration 018): every due run (CROSS JOIN:
            -- the queues are the outer loop, so without any no run is read) ...
            SELECT r.id, r.queue, r.claim_at, q.lim, coalesce(r.concurrency_key, '') AS part
            FROM (
                SELECT json_extract(value, '$[0]') AS queue, json_extract(value, '$[1]') AS lim
                FROM json_each(:ranked)
            ) q
            CROSS JOIN runlane_runs r
            WHERE r.queue = q.queue
              AND r.environment = :environment
              AND (r.status = 'queued' OR r.status = 'scheduled' OR r.status = 'retrying'
                   OR r.status = 'released')
              AND r.run_at <= :now
              AND r.partition_key IS NULL
            UNION ALL
            -- ... and of the others the first due runs, as many as the limit, which
            -- first_due_runs read in this transaction (:firsts, their ids).
            SELECT r.id, r.queue, r.claim_at, q.lim, coalesce(r.concurrency_key, '') AS part
            FROM runlane_runs r
            JOIN (
                SELECT json_extract(value, '$[0]') AS queue, json_extract(value, '$[1]') AS lim
                FROM json_each(:bounded)
            ) q ON q.queue = r.queue
            WHERE r.environment = :environment
              AND r.id IN (SELECT value FROM json_each(:firsts))
            UNION ALL
            SELECT f.id, f.queue, f.claim_at, f.lim, f.part FROM (
                SELECT k.id, k.queue, k.run_at, k.claim_at, q.lim,
                       coalesce(k.concurrency_key, '') AS part,
                       k.task_id, k.partition_key,
                       row_number() OVER (
                           PARTITION BY k.task_id, k.partition_key ORDER BY k.run_at, k.id
                       ) AS rank_in_key
                FROM runlane_runs k INDEXED BY runlane_runs_keyed
                JOIN (
                    SELECT json_extract(value, '$[0]') AS queue,
                           json_extract(value, '$[1]') AS lim
                    FROM json_each(:bounded)
                ) q ON q.queue = k.queue
                WHERE k.environment = :environment
                  AND k.partition_key IS NOT NULL
                  AND (k.status = 'queued' OR k.status = 'scheduled'
                       OR k.status = 'retrying' OR k.status = 'released'
                       OR k.status = 'running' OR k.status = 'cancellation_requested'
                       OR k.status = 'dead_lettered')
                  AND (k.status = 'queued' OR k.status = 'scheduled'
                       OR k.status = 'retrying' OR k.status = 'released')
                  AND k.run_at <= :now
                  -- ORDERED: the key's head (no unfinished delivery before it).
                  AND (k.subscription_mode <> 'ordered' OR NOT EXISTS (
                      SELECT 1 FROM runlane_runs o
                      WHERE o.environment = k.environment AND o.task_id = k.task_id
                        AND o.partition_key = k.partition_key
                        AND (o.status = 'queued' OR o.status = 'scheduled'
                             OR o.status = 'retrying' OR o.status = 'released'
                             OR o.status = 'running' OR o.status = 'cancellation_requested'
                             OR o.status = 'dead_lettered')
                        AND o.message_sequence < k.message_sequence
                  ))
            ) f
            WHERE f.rank_in_key = 1
              -- No delivery of the key holds an unexpired lease.
              AND NOT EXISTS (
                  SELECT 1 FROM runlane_runs o
                  WHERE o.environment = :environment AND o.task_id = f.task_id
                    AND o.partition_key = f.partition_key
                    AND (o.status = 'queued' OR o.status = 'scheduled'
                         OR o.status = 'retrying' OR o.status = 'released'
                         OR o.status = 'running' OR o.status = 'cancellation_requested'
                         OR o.status = 'dead_lettered')
                    AND (o.status = 'running' OR o.status = 'cancellation_requested')
                    AND o.lease_expires_at > :now
              )
        ) e
    ) c
    LEFT JOIN (
        SELECT queue, coalesce(concurrency_key, '') AS part, count(*) AS n
        FROM runlane_runs
        WHERE environment = :environment
          AND queue IN (SELECT json_extract(value, '$[0]') FROM json_each(:bounded))
          AND (status = 'running' OR status = 'cancellation_requested')
          AND lease_expires_at > :now
        GROUP BY queue, part
    ) o ON o.queue = c.queue AND o.part = c.part
    WHERE c.rn <= c.lim - coalesce(o.n, 0)
    ORDER BY c.claim_at, c.id
    LIMIT :limit
)
-- The columns a run is built from (rows.RUN_COLUMNS), not the bookkeeping ones:
-- sqlite3 converts every column returned, one call into SQLite each.
RETURNING id, environment, task_id, queue, status, payload, attempt, failure_count, run_at,
          created_at, updated_at, event_sequence, source, result, failure, idempotency_key,
          singleton_key, concurrency_key, trace_carrier, lease_owner, lease_token,
          lease_expires_at, cancel_reason, partition_key, replays, subscription_mode,
          message_sequence, dead_letter_reason, dead_lettered_at, rate_key, priority;

-- name: claim_run
-- One run, if it is claimable and due and its key (if any) lets it run.
UPDATE runlane_runs
SET status = 'running',
    attempt = attempt + 1,
    event_sequence = event_sequence + 1,
    lease_owner = :worker_id,
    lease_token = :lease_token,
    lease_expires_at = :lease_expires_at,
    reserved_until = NULL,
    updated_at = :now,
    -- run.started is implied by these (migration 016).
    started_sequence = event_sequence + 1,
    started_at = :now,
    started_by = :worker_id,
    started_lease_expires_at = :lease_expires_at
WHERE environment = :environment AND id IN (
    SELECT k.id FROM runlane_runs k
    WHERE k.environment = :environment AND k.id = :id
      AND (k.status = 'queued' OR k.status = 'scheduled' OR k.status = 'retrying'
           OR k.status = 'released')
      AND k.run_at <= :now
      AND (k.partition_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM runlane_runs o
          WHERE o.environment = k.environment AND o.task_id = k.task_id
            AND o.partition_key = k.partition_key
            AND (o.status = 'queued' OR o.status = 'scheduled' OR o.status = 'retrying'
                 OR o.status = 'released' OR o.status = 'running'
                 OR o.status = 'cancellation_requested' OR o.status = 'dead_lettered')
            AND (((o.status = 'running' OR o.status = 'cancellation_requested')
                  AND o.lease_expires_at > :now)
                 OR (k.subscription_mode = 'ordered'
                     AND o.message_sequence < k.message_sequence))
      ))
)
-- The columns a run is built from (rows.RUN_COLUMNS), not the bookkeeping ones:
-- sqlite3 converts every column returned, one call into SQLite each.
RETURNING id, environment, task_id, queue, status, payload, attempt, failure_count, run_at,
          created_at, updated_at, event_sequence, source, result, failure, idempotency_key,
          singleton_key, concurrency_key, trace_carrier, lease_owner, lease_token,
          lease_expires_at, cancel_reason, partition_key, replays, subscription_mode,
          message_sequence, dead_letter_reason, dead_lettered_at, rate_key, priority;

-- name: key_unavailable
-- execute_delivery's ignore path, for a delivery with a key that is due and waiting
-- yet was not claimed: its delivery request is cleared, so tick requests it again
-- once it is claimable; blocked says whether its key is what keeps it waiting (the
-- rule of claim_run).
UPDATE runlane_runs
SET delivery_requested_at = NULL, reserved_until = NULL
WHERE environment = :environment AND id = :id
  AND partition_key IS NOT NULL
  AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying' OR status = 'released')
  AND run_at <= :now
RETURNING id, EXISTS (
    SELECT 1 FROM runlane_runs o
    WHERE o.environment = runlane_runs.environment AND o.task_id = runlane_runs.task_id
      AND o.partition_key = runlane_runs.partition_key
      AND (o.status = 'queued' OR o.status = 'scheduled' OR o.status = 'retrying'
           OR o.status = 'released' OR o.status = 'running'
           OR o.status = 'cancellation_requested' OR o.status = 'dead_lettered')
      AND (((o.status = 'running' OR o.status = 'cancellation_requested')
            AND o.lease_expires_at > :now)
           OR (runlane_runs.subscription_mode = 'ordered'
               AND o.message_sequence < runlane_runs.message_sequence))
) AS blocked;

-- name: occupied_capacity
SELECT count(*) AS n FROM runlane_runs
WHERE environment = :environment AND queue = :queue
  AND coalesce(concurrency_key, '') = coalesce(:concurrency_key, '')
  AND (status = 'running' OR status = 'cancellation_requested')
  AND lease_expires_at > :now;
