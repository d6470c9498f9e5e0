"""The driver's named statements, loaded once from ``queries.sql``."""

from __future__ import annotations

from runlane.storage.records import load_queries


def _compose_claims(queries: dict[str, str]) -> dict[str, str]:
    """Each claim: the shared leasing head around the query choosing its runs."""
    head = queries["lease_candidates"]
    return {
        name: f"{head}\n{queries[candidates]}\n)\nRETURNING *"
        for name, candidates in (
            ("claim_due_runs", "due_candidates"),
            ("claim_bounded_runs", "bounded_candidates"),
            ("claim_run", "run_candidate"),
        )
    }


#: Every statement of ``queries.sql`` by its ``-- name:``, and the composed claims.
QUERIES = load_queries("runlane.storage.sqlite")
QUERIES.update(_compose_claims(QUERIES))
