"""CloudWatch Embedded Metric Format from the SQS Lambda handler (no dependency).

::

    from runlane.emf import emf_metrics
    from runlane.sqs import create_sqs_lambda_handler

    handler = create_sqs_lambda_handler(
        execute_delivery=rl.execute_delivery, metrics=emf_metrics(namespace="Runlane")
    )

After each invocation, one JSON line goes to ``stream`` (default ``sys.stdout``,
which Lambda ships to CloudWatch Logs, where it becomes metrics): ``Records``,
``Executed``, ``Succeeded``, ``Retried``, ``Released``, ``Failed``,
``Cancelled``, ``Ignored``, ``DeliveryFailures``, ``NotStarted`` (Count) and
``DurationMs`` (Milliseconds), with the dimension ``Queue`` (the runlane queue
of the invocation's wakeups, ``"mixed"`` or ``"unknown"``) plus the keys of
``dimensions``. The line is written even when the invocation raises.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING

from runlane.types.errors import configuration_error

if TYPE_CHECKING:
    from runlane.sqs import LambdaInvocation

__all__ = ["EmfMetrics", "emf_metrics"]

#: CloudWatch allows 30 dimensions per set; ``Queue`` is one of them.
MAX_EXTRA_DIMENSIONS = 29

#: (metric name, unit, LambdaInvocation field), in the order they are declared.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("Records", "Count", "records"),
    ("Executed", "Count", "executed"),
    ("Succeeded", "Count", "succeeded"),
    ("Retried", "Count", "retried"),
    ("Released", "Count", "released"),
    ("Failed", "Count", "failed"),
    ("Cancelled", "Count", "cancelled"),
    ("Ignored", "Count", "ignored"),
    ("DeliveryFailures", "Count", "delivery_failures"),
    ("NotStarted", "Count", "not_started"),
    ("DurationMs", "Milliseconds", "duration_ms"),
)


class EmfMetrics:
    """Writes one EMF document per Lambda invocation; build it with :func:`emf_metrics`."""

    def __init__(
        self, namespace: str, dimensions: Mapping[str, str], stream: IO[str] | None
    ) -> None:
        self.namespace = namespace
        self.dimensions = dict(dimensions)
        self._stream = stream

    def document(self, report: LambdaInvocation) -> dict[str, object]:
        """The EMF document for ``report``."""
        names = ["Queue", *self.dimensions]
        doc: dict[str, object] = {
            "_aws": {
                "Timestamp": int(time.time() * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": self.namespace,
                        "Dimensions": [names],
                        "Metrics": [{"Name": name, "Unit": unit} for name, unit, _ in METRICS],
                    }
                ],
            },
            "Queue": report.queue,
            **self.dimensions,
        }
        for name, _, attribute in METRICS:
            value = getattr(report, attribute)
            doc[name] = round(value, 3) if isinstance(value, float) else value
        return doc

    def invocation(self, report: LambdaInvocation) -> None:
        """Write the document for ``report`` as one line and flush."""
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write(json.dumps(self.document(report), separators=(",", ":")) + "\n")
        stream.flush()


def emf_metrics(
    namespace: str = "Runlane",
    dimensions: Mapping[str, str] | None = None,
    stream: IO[str] | None = None,
) -> EmfMetrics:
    """Metrics for ``create_sqs_lambda_handler(..., metrics=...)`` in CloudWatch EMF.

    ``dimensions`` are static extra dimensions (e.g. ``{"Service": "billing"}``),
    added to ``Queue`` in one dimension set; ``stream`` defaults to ``sys.stdout``
    as it is when each line is written.
    """
    if not isinstance(namespace, str) or not namespace.strip():
        raise configuration_error("emf_metrics: namespace must be a non-empty string.")
    extra = dict(dimensions or {})
    for key, value in extra.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key or not value:
            raise configuration_error(
                "emf_metrics: dimensions must map non-empty strings to non-empty strings."
            )
        if key == "Queue" or key == "_aws" or key in {name for name, _, _ in METRICS}:
            raise configuration_error(
                f"emf_metrics: dimension {key!r} clashes with a name Runlane writes; "
                "choose another key."
            )
    if len(extra) > MAX_EXTRA_DIMENSIONS:
        raise configuration_error(
            f"emf_metrics: at most {MAX_EXTRA_DIMENSIONS} extra dimensions (CloudWatch "
            "allows 30 per set, Queue included)."
        )
    if stream is not None and not callable(getattr(stream, "write", None)):
        raise configuration_error("emf_metrics: stream must be a text stream with write().")
    return EmfMetrics(namespace, extra, stream)
