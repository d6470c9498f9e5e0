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
    ],
)
def test_a_hot_statement_stays_short_enough_for_psycopgs_cache(name: str) -> None:
    statement = QUERY_TEMPLATES[name].replace("{schema}", LONGEST_SCHEMA)
    assert len(statement.encode()) <= PSYCOPG_CACHED_LENGTH
