"""Serving the dashboard with uvicorn on a socket the caller has already bound."""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Iterator
from types import FrameType

import uvicorn
from starlette.types import ASGIApp


class _Server(uvicorn.Server):
    """Stops on SIGINT/SIGTERM and returns normally (so the command exits 0) instead of
    re-raising the signal once it has shut down, as uvicorn does by default."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self._stop) for sig in stops}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stop(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:
            self.force_exit = True  # a second Ctrl-C does not wait for open requests
        self.should_exit = True


async def serve(app: ASGIApp, listener: socket.socket) -> None:
    """Serve ``app`` on ``listener`` until SIGINT or SIGTERM (no access log: URLs stay private)."""
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    await _Server(config).serve(sockets=[listener])
