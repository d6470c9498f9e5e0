"""Batch row shapes: the positional rows the hot statements take, each declared once.

A batch travels as one JSON array of arrays (``insert_runs``, ``apply_transitions``,
``insert_deliveries``, ``publish_plain_messages``) or as COPY text lines (``copy_runs``):
by position, which is what makes them cheap.
Each shape below is the one place that order is written down. The statements in
the ``.sql`` files stay whole (they can be copied into ``EXPLAIN``) and name the
fields by position; a unit test reads them and proves they agree with these
declarations, and the encoders in :mod:`params` and :mod:`transitions` are tested
against them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RowShape:
    """The fields of one positional row, in order, each with the SQL type it is read as."""

    fields: tuple[tuple[str, str], ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The field names, in row order."""
        return tuple(name for name, _ in self.fields)

    @property
    def types(self) -> list[str]:
        """The SQL types, in row order."""
        return [sql_type for _, sql_type in self.fields]


#: A run of ``insert_runs``' ``runs`` parameter. The payload is a JSON string holding the
#: payload's text (read as json, so it is kept exactly as written); the source and trace
#: carrier are spliced in as the JSON they already are.
INSERT_RUN = RowShape(
    (
        ("id", "text"),
        ("task_id", "text"),
        ("queue", "text"),
        ("status", "text"),
        ("payload", "json"),
        ("run_at", "bigint"),
        ("event_sequence", "int"),
        ("source", "jsonb"),
        ("idempotency_key", "text"),
        ("singleton_key", "text"),
        ("concurrency_key", "text"),
        ("trace_carrier", "jsonb"),
        ("request_delivery", "bool"),
        ("priority", "int"),
        ("priority_offset", "bigint"),
        # Absent (NULL) unless the run's queue is rate-limited per key.
        ("rate_key", "text"),
    )
)

#: A transition of ``apply_transitions``' ``transitions`` parameter.
TRANSITION = RowShape(
    (
        ("id", "text"),
        ("status", "text"),
        ("run_at", "bigint"),
        ("result", "jsonb"),
        ("failure", "jsonb"),
        ("cancel_reason", "text"),
        ("add_failure", "int"),
        ("event_count", "int"),
        ("keep_lease", "bool"),
        ("expected_sequence", "int"),
        ("lease_token", "text"),
        ("lease_expired_by", "bigint"),
        ("reset_failures", "bool"),
        ("replays", "int"),
        ("dead_letter_reason", "text"),
        ("dead_lettered_at", "bigint"),
        ("succeeded_attempt", "int"),
        # The last progress of the attempt it settles (migration 018), all NULL when
        # it carries none; data is the JSON text of the task's data.
        ("progress_attempt", "int"),
        ("progress_fraction", "float8"),
        ("progress_message", "text"),
        ("progress_data", "jsonb"),
    )
)

#: A delivery of ``insert_deliveries``' ``deliveries`` parameter (one published message's).
INSERT_DELIVERY = RowShape(
    (
        ("id", "text"),
        ("task_id", "text"),
        ("queue", "text"),
        ("partition_key", "text"),
        ("subscription_mode", "text"),
        ("request_delivery", "bool"),
        ("rate_key", "text"),
    )
)

#: A message of ``publish_plain_messages``' ``messages`` parameter. The payload is a JSON
#: string holding its text (read as json, so it is kept exactly as written); attributes,
#: trace carrier and the deliveries' source are spliced in as the JSON they are.
PUBLISH_MESSAGE = RowShape(
    (
        ("id", "text"),
        ("topic", "text"),
        ("payload", "json"),
        ("attributes", "jsonb"),
        ("envelope", "text"),
        ("window_ends_at", "bigint"),
        ("trace_carrier", "jsonb"),
        ("source", "jsonb"),
    )
)

#: A delivery of ``publish_plain_messages``' ``deliveries`` parameter: the position (from
#: 1) of its message in ``messages``, then what :data:`INSERT_DELIVERY` carries.
PUBLISH_DELIVERY = RowShape((("message", "int"), *INSERT_DELIVERY.fields))

#: An event of ``apply_transitions``' ``events`` parameter.
TRANSITION_EVENT = RowShape(
    (
        ("run_id", "text"),
        ("sequence", "int"),
        ("type", "text"),
        ("data", "jsonb"),
    )
)

#: A line of ``copy_runs`` (text COPY: the types are the columns' own).
COPY_RUN = RowShape(
    (
        ("environment", "text"),
        ("id", "text"),
        ("task_id", "text"),
        ("queue", "text"),
        ("status", "text"),
        ("payload", "json"),
        ("attempt", "int4"),
        ("failure_count", "int4"),
        ("run_at", "int8"),
        ("first_run_at", "int8"),
        ("created_at", "int8"),
        ("updated_at", "int8"),
        ("event_sequence", "int4"),
        ("source", "jsonb"),
        ("concurrency_key", "text"),
        ("trace_carrier", "jsonb"),
        ("priority", "int4"),
        ("priority_offset", "int8"),
        # A batch's shared field, like the queue: \N unless it is rate-limited per key.
        ("rate_key", "text"),
    )
)
