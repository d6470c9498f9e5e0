"""The driver's named statements, loaded once from its ``*.sql`` files."""

from __future__ import annotations

from runlane.storage.sql.queryfiles import load_queries

#: Every statement of the driver's ``*.sql`` files by its ``-- name:``.
QUERIES = load_queries("runlane.storage.sqlite")
