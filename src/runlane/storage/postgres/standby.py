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
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from runlane.ports.storage import Standby
from runlane.storage.postgres.connections import execute
from runlane.storage.sql.rows import RUN_COLUMNS, RunDecoder, runs_from_rows
from runlane.types.ids import new_token
from runlane.types.runs import Run

if TYPE_CHECKING:
    from runlane.storage.postgres.connections import PostgresConnection
    from runlane.storage.postgres.listener import HandoffAddress, WorkListener
    from runlane.storage.postgres.sessions import Queries

#: Seconds a worker standing by waits for the listening connection to be made.
STANDBY_CONNECT_WITHIN = 1.0

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


def offer_params(
    offer: Offer,
    environment: str,
    worker_id: str,
    queues: Sequence[str],
    slots: int,
    lease_duration: float,
    address: HandoffAddress,
) -> dict[str, Any]:
    """Parameters of ``stand_by``: the offer's slots, queues, lease and where it listens."""
    return {
        "environment": environment,
        "lease_token": offer.token,
        "worker_id": worker_id,
        "queues": list(queues),
        "free": slots,
        "lease_micros": round(lease_duration * 1_000_000),
        "channel": address.channel,
        "lock_key": address.lock_key,
    }


class HandOffCalls:
    """The driver's ``HandsOff`` methods (see ``runlane.ports.storage``), apart from the
    rest of :class:`~.driver.PostgresStorage`, which supplies what is declared here."""

    _db: PostgresConnection
    _q: Queries
    _listener: WorkListener | None

    if TYPE_CHECKING:

        def _work_listener(self) -> WorkListener: ...

        async def _fetch(self, query: str, params: dict[str, Any]) -> list[Any]: ...

        async def _count(self, query: str, params: dict[str, Any]) -> int: ...

    async def stand_by(
        self,
        environment: str,
        worker_id: str,
        queues: Sequence[str],
        slots: int,
        lease_duration: float,
        start: Callable[[list[Run]], None],
    ) -> Standby | None:
        """Offer ``slots`` free slots on ``queues`` to lone triggers of due runs, which
        go to ``start``; None while the listening connection (which hears hand-offs)
        cannot be made."""
        if not queues or slots < 1:
            return None
        listener = self._work_listener()
        address = await listener.address(STANDBY_CONNECT_WITHIN)
        if address is None:
            return None
        offer = Offer(new_token(), start)
        params = offer_params(offer, environment, worker_id, queues, slots, lease_duration, address)
        # Heard from before the offer is visible: a hand-off may follow at once.
        listener.receive(offer.token, offer)
        try:
            await self._db.run(partial(execute, self._q["stand_by"], params))
        except BaseException:
            listener.forget(offer.token)
            raise
        return offer

    async def stand_down(self, environment: str, standby: Standby) -> list[Run]:
        """Withdraw ``standby``; the runs handed to it that it has not given out yet."""
        if not isinstance(standby, Offer):
            raise TypeError("stand_down takes an offer this storage made")
        params = {"environment": environment, "lease_token": standby.token}
        try:
            rows = await self._fetch("stand_down", params)
        finally:
            # Heard no more either way: the worker may be gone by the next notification.
            if self._listener is not None:
                self._listener.forget(standby.token)
        missing = [run_id for run_id in rows[0]["handed"] if run_id not in standby.seen]
        if not missing:
            return []
        return runs_from_rows(await self._fetch("handed_runs", {**params, "ids": missing}))

    async def remove_dead_offers(self, environment: str) -> int:
        """Remove the offers of workers whose listening connection is gone."""
        return await self._count("remove_dead_offers", {"environment": environment})
