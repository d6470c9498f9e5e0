"""The hot statements run once per claim, settle or publish (or per group of them):
psycopg caches the conversion of a statement's ``%(name)s`` placeholders only up to
4,096 bytes, and converts a longer one anew on every execution (about 155 µs for the
claim, more than running it)."""

from __future__ import annotations

import pytest

from runlane.storage.postgres.queries import QUERY_TEMPLATES

#: psycopg's ``MAX_CACHED_STATEMENT_LENGTH``.
PSYCOPG_CACHED_LENGTH = 4096
#: The longest schema name a lane accepts, quoted.
LONGEST_SCHEMA = '"' + "s" * 63 + '"'


@pytest.mark.parametrize(
    "name",
    [
        "publish_plain_message",
        "publish_plain_messages",
        "insert_deliveries",
        "claim_due_runs",
        "claim_bounded_runs",
        "lock_claimable_keys",
        "claim_run",
        "apply_transitions",
        "apply_finishing_transitions",
    ],
)
def test_a_hot_statement_stays_short_enough_for_psycopgs_cache(name: str) -> None:
    statement = QUERY_TEMPLATES[name].replace("{schema}", LONGEST_SCHEMA)
    assert len(statement.encode()) <= PSYCOPG_CACHED_LENGTH


#: What apply_finishing_transitions adds to apply_transitions (migration 021).
ANNOUNCEMENT = (
    "AND (SELECT pg_notify(%(channel)s, set_config('runlane.announced', %(environment)s, true)))\n"
    "IS NOT NULL\n"
)


def test_the_finishing_settle_is_the_settle_and_its_announcement() -> None:
    # Two whole statements in the file: an edit of one that misses the other fails here.
    settle = QUERY_TEMPLATES["apply_transitions"]
    anchor = "r.lease_expires_at <= input.lease_expired_by)\n"
    assert settle.count(anchor) == 1
    assert QUERY_TEMPLATES["apply_finishing_transitions"] == settle.replace(
        anchor, anchor + ANNOUNCEMENT
    )
