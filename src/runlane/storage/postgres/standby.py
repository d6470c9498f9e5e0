"""Hand-offs: a lone trigger gives a due run, already leased, to an idle worker.

A worker with nothing to claim offers its free slots (a row of the UNLOGGED
``runlane_standby`` table, migration 011) and waits. A lone trigger of a due run
on one of its queues takes a slot in its own statement (``insert_run_handoff``):
the run is written leased to the worker, with ``run.started``, and the worker's
listening connection is told, with the row. So the run starts after one commit,
the trigger's, where a claim would add a second. (A producer that found no offer
on a queue sends the plain ``insert_run`` for a short while: see the driver's
``HANDOFF_RECHECK``.)

Nothing here is trusted for durability: the run and its lease are ordinary rows
written in the trigger's transaction. An offer records the runs handed to it, so
withdrawing it returns every one even when a notification went missing; a run
handed to a worker that then died is an expired lease like any other.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from runlane.storage.sql.rows import RUN_COLUMNS, RunDecoder
from runlane.types.runs import Run

logger = logging.getLogger("runlane.postgres")


class Offer:
    """One stand-by of a worker: passes the runs its listener hears were handed over
    to ``start`` at once, in the listener's task (nothing else is awaited first)."""

    __slots__ = ("_start", "arrived", "seen", "token")

    def __init__(self, token: str, start: Callable[[list[Run]], None]) -> None:
        #: The offer's name in storage, and the fencing token of the runs handed to it.
        self.token = token
        self.arrived = asyncio.Event()
        #: Ids of the runs given to ``start``.
        self.seen: set[str] = set()
        self._start = start

    def deliver(self, run_id: str, row_text: str | None) -> None:
        """A hand-off notification: start the run when its row came with it. Either way
        the worker wakes to withdraw the offer and stand by afresh: an offer left up
        until its slots ran out would leave the triggers after it none to find (tried:
        one in six triggers at 100/s then found none, against none of them here)."""
        if row_text is not None and run_id not in self.seen:
            try:
                run = RunDecoder(RUN_COLUMNS).run(json.loads(row_text))
            except (ValueError, TypeError, KeyError, IndexError):
                # Read back from storage when the offer is withdrawn.
                logger.warning("hand-off of run %s: unreadable row; reading it back", run_id)
            else:
                self.seen.add(run_id)
                self._start([run])
        self.arrived.set()

    def lost(self) -> None:
        """The listening connection was lost: runs may have been handed over unheard."""
        self.arrived.set()
