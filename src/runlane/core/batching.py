"""Group concurrent writes into one storage call (natural batching, no timers).

The first write starts a flush right away; writes that arrive while it is in
flight ride on the next one. Under load this turns N settles into a handful of
round trips; when idle it adds no latency.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from runlane.core.models import Run
from runlane.core.transitions import project
from runlane.storage.protocol import Transition

if TYPE_CHECKING:
    from runlane.core.runtime import Runlane

#: Most transitions written in one storage call.
MAX_SETTLE_BATCH = 500


class TransitionBatcher:
    """Applies transitions for one runtime, batching those that arrive together."""

    def __init__(self, runtime: Runlane) -> None:
        self._rt = runtime
        self._pending: list[tuple[Run, Transition, asyncio.Future[Run | None]]] = []
        self._flushing: asyncio.Task[None] | None = None

    async def apply(self, run: Run, transition: Transition) -> Run | None:
        """Apply one transition of ``run``; the run as stored after it, or ``None`` when its
        compare-and-set condition failed."""
        future: asyncio.Future[Run | None] = asyncio.get_running_loop().create_future()
        self._pending.append((run, transition, future))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush())
        return await future

    async def _flush(self) -> None:
        rt = self._rt
        while self._pending:
            batch, self._pending = (
                self._pending[:MAX_SETTLE_BATCH],
                self._pending[MAX_SETTLE_BATCH:],
            )
            now = rt.clock.now()
            try:
                applied = await rt.storage.apply_transitions(
                    rt.environment, [t for _, t, _ in batch], now
                )
            except BaseException as error:
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                if not isinstance(error, Exception):
                    raise
                continue
            for (run, transition, future), ok in zip(batch, applied, strict=True):
                if not future.done():
                    future.set_result(project(run, transition, now) if ok else None)
