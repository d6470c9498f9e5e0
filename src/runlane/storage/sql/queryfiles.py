"""Annotated SQL files: named statements (``-- name: claim_due_runs`` blocks, as
procrastinate's ``queries.sql``) and numbered migrations."""

from __future__ import annotations

import re
from importlib import resources

_QUERY_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def load_queries(package: str) -> dict[str, str]:
    """Every named statement of a package's ``*.sql`` files (one file per concern: runs,
    claims, outbox, ...): each statement starts at a ``-- name: xyz`` line and is whole,
    so it can be copied into ``EXPLAIN`` as it stands. A name used twice is an error."""
    queries: dict[str, str] = {}
    files = sorted(
        (entry for entry in resources.files(package).iterdir() if entry.name.endswith(".sql")),
        key=lambda entry: entry.name,
    )
    for entry in files:
        parts = _QUERY_HEADER.split(entry.read_text())
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise RuntimeError(f"query {name!r} is named twice in {package}")
            queries[name] = _compact(body)
    if not queries:
        raise RuntimeError(f"no named queries in {package}")
    return queries


def _compact(body: str) -> str:
    """A statement as the driver sends it: without whole-line comments, indentation or
    blank lines. The files keep both for readers; the wire copy stays short, because
    psycopg caches its placeholder conversion only for statements up to 4,096 bytes
    and converting a long claim afresh costs more per call than running it."""
    lines = (line.strip() for line in body.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("--")).rstrip(";")


def load_migrations(package: str) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` for every ``NNN_name.sql`` in a migrations package, in order."""
    found = []
    for entry in resources.files(package).iterdir():
        match = re.match(r"^(\d+)_(\w+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text()))
    return sorted(found)
