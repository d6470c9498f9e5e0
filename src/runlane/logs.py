"""Structured logs: ``JsonFormatter`` writes one JSON object per record.

Runlane logs through stdlib ``logging`` under ``runlane.*``. Records about one
run carry ``event``, ``run_id``, ``task_id``, ``queue``, ``attempt``,
``worker_id`` and, where relevant, ``outcome``, ``duration``, ``error_type``,
``error_code`` and ``delay_seconds`` as record attributes (``extra=``). This
formatter turns each record into one line::

    import logging
    from runlane.logs import JsonFormatter

    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.getLogger("runlane").addHandler(handler)

With OpenTelemetry installed and a span current, ``trace_id`` and ``span_id``
(hex) are added. A handler that formats later, on another thread
(``QueueHandler``), should capture them when the record is made with
:class:`TraceContextFilter`. Nothing here needs a package beyond the core install.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter", "TraceContextFilter", "current_trace_ids"]

#: Attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
) | {"message", "asctime", "taskName"}


def current_trace_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` in hex of the current OpenTelemetry span, if any."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


class TraceContextFilter(logging.Filter):
    """Stamps ``trace_id`` and ``span_id`` on each record while the span is current
    (add it to the logger or to a ``QueueHandler``); never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            ids = current_trace_ids()
            if ids is not None:
                record.trace_id, record.span_id = ids
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (ISO 8601 UTC), ``level``, ``logger``,
    ``message``, every ``extra=`` attribute, ``exc_info`` (the formatted traceback)
    when there is one, and ``trace_id``/``span_id`` when a span is current."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if "trace_id" not in data:
            ids = current_trace_ids()
            if ids is not None:
                data["trace_id"], data["span_id"] = ids
        if record.exc_info:
            data["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            data["exc_info"] = record.exc_text
        if record.stack_info:
            data["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(data, ensure_ascii=False, default=str)
