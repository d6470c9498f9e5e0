"""Hearing that runs finished, for ``rl.runs.wait``: LISTEN on the environment's channel.

Every run that becomes terminal notifies ``runlane_finished_<md5 of the
environment>`` at commit, whatever statement finished it: the settle statement
(``apply_finishing_transitions``) once for its runs, migration 012's trigger for any
other statement (migration 021 makes it skip an environment the transaction
announced). One listening connection per environment waited on serves every waiter of
the process (the runtime's waiters share one storage); it is made on the first wait
and reconnects lazily, as the work listener does (it is one: same connection
handling, keyed by the environment the notification carries).
"""

from __future__ import annotations

import hashlib

from runlane.storage.postgres.listener import Connect, WorkListener

#: Channel names start with this; the md5 keeps them within PostgreSQL's 63 bytes.
FINISHED_CHANNEL_PREFIX = "runlane_finished_"


def finished_channel(environment: str) -> str:
    """The channel on which runs of ``environment`` announce that they finished."""
    digest = hashlib.md5(environment.encode(), usedforsecurity=False).hexdigest()
    return FINISHED_CHANNEL_PREFIX + digest


class FinishedRunListeners:
    """One listener per environment waited on, made on first use."""

    def __init__(self, connect: Connect) -> None:
        """Listen on connections ``connect`` makes (autocommit, of their own)."""
        self._connect = connect
        self._listeners: dict[str, WorkListener] = {}

    async def listen(self, environment: str, within: float) -> bool:
        """Listen for ``environment`` (connecting within ``within`` seconds) if not yet;
        whether the connection listens now."""
        return await self._listener(environment).address(within) is not None

    async def wait(self, environment: str, within: float) -> bool:
        """True once runs of ``environment`` were announced finished (maybe before this
        call); False after ``within`` seconds or when announcements may have been missed."""
        return await self._listener(environment).wait(environment, within)

    def _listener(self, environment: str) -> WorkListener:
        listener = self._listeners.get(environment)
        if listener is None:
            listener = WorkListener(self._connect, finished_channel(environment))
            self._listeners[environment] = listener
        return listener

    async def close(self) -> None:
        """Stop listening."""
        listeners, self._listeners = self._listeners, {}
        for listener in listeners.values():
            await listener.close()
