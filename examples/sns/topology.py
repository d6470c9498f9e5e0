"""Writes topology.json, the subscriptions as main.tf needs them: ``python topology.py``.

Terraform reads the filter policies and redrive settings from that file, so they
are derived from the subscription definitions and cannot drift from them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orders import SUBSCRIPTIONS, orders

from runlane.sns import sns_filter_policy

#: The SQS redrive moves a message this many receives past max_attempts: after the
#: consumer's own guard (max_attempts + 2), for crash loops it never saw.
REDRIVE_MARGIN = 5


def topology() -> dict[str, Any]:
    """The topic and, per subscription, its queue name, filter policy and redrive count."""
    return {
        "topic": orders.name,
        "subscriptions": {
            name: {
                "queue": name.replace(".", "-"),
                "filter_policy": sns_filter_policy(definition),
                "max_receive_count": definition.retry.max_attempts + REDRIVE_MARGIN,
            }
            for name, definition in SUBSCRIPTIONS.items()
        },
    }


if __name__ == "__main__":
    target = Path(__file__).with_name("topology.json")
    target.write_text(json.dumps(topology(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {target.name}")
