"""The driver's named statements, loaded once from ``queries.sql``."""

from __future__ import annotations

from runlane.storage.records import load_queries

#: Every statement of ``queries.sql`` by its ``-- name:``.
QUERIES = load_queries("runlane.storage.sqlite")
