"""The publish statements run once per publish (or per group of them): psycopg caches
the conversion of a statement's ``%(name)s`` placeholders only up to 4,096 bytes,
and converts a longer one anew on every execution."""

from __future__ import annotations

import pytest

from runlane.storage.postgres.queries import QUERY_TEMPLATES

#: psycopg's ``MAX_CACHED_STATEMENT_LENGTH``.
PSYCOPG_CACHED_LENGTH = 4096
#: The longest schema name a lane accepts, quoted.
LONGEST_SCHEMA = '"' + "s" * 63 + '"'


@pytest.mark.parametrize(
    "name", ["publish_plain_message", "publish_plain_messages", "insert_deliveries"]
)
def test_a_publish_statement_stays_short_enough_for_psycopgs_cache(name: str) -> None:
    statement = QUERY_TEMPLATES[name].replace("{schema}", LONGEST_SCHEMA)
    assert len(statement.encode()) <= PSYCOPG_CACHED_LENGTH
