"""The driver's named statements, loaded once from its ``*.sql`` files."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

from runlane.storage.sql.queryfiles import load_queries

#: Every statement of the driver's ``*.sql`` files by its ``-- name:``.
QUERIES = load_queries("runlane.storage.sqlite")

_PARAMETER = re.compile(r":([A-Za-z_][A-Za-z0-9_]*)")


class Numbered:
    """A named statement with its ``:name`` parameters as qmark placeholders (``?``), in
    the order they appear, and :meth:`values` to turn its named parameters into that
    order (a name used twice is bound twice).

    ``sqlite3`` binds a named parameter by building a string from the statement's
    parameter name and looking it up in the mapping: a few hundred instructions per
    parameter and row. The statements bound for every run (a settle's compare-and-set,
    an event's insert, a lone trigger's insert) bind tuples instead; the ``.sql``
    files keep the names. Plain ``?`` rather than numbered ``?1``, which would bind a
    repeated name once: from Python 3.12 ``sqlite3`` takes ``?1`` for a named
    placeholder and warns for each one bound from a sequence (formatting and filtering
    a DeprecationWarning per parameter and statement, far dearer than the extra
    binding), and later versions are to refuse it.
    """

    __slots__ = ("names", "sql", "values")

    def __init__(self, sql: str) -> None:
        if "'" in sql or '"' in sql:
            # A colon inside a literal would be taken for a parameter.
            raise ValueError("named statements must not hold quoted text")
        names: list[str] = []

        def placeholder(match: re.Match[str]) -> str:
            names.append(match.group(1))
            return "?"

        self.sql = _PARAMETER.sub(placeholder, sql)
        self.names = tuple(names)
        getter = itemgetter(*names)
        self.values: Callable[[Mapping[str, Any]], tuple[Any, ...]] = (
            getter if len(names) > 1 else lambda params: (getter(params),)
        )


#: The statements bound once per run on the hot paths, by position (see :class:`Numbered`).
NUMBERED = {
    name: Numbered(QUERIES[name])
    for name in (
        "apply_transition",
        "apply_progress_transition",
        "insert_event",
        "insert_plain_run",
        "insert_plain_keyed_run",
    )
}
