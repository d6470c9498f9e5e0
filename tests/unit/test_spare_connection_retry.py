"""The spare connection does not try to open at every call after an opening failed
(a server at its connection limit would see one attempt per statement)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from runlane.storage.postgres.connections import SpareConnection


async def test_a_failed_opening_waits_before_the_next_attempt() -> None:
    attempts = 0

    async def refused() -> psycopg.AsyncConnection[Any]:
        nonlocal attempts
        attempts += 1
        raise psycopg.OperationalError("too many clients already")

    spare = SpareConnection(refused, retry_after=0.2)
    try:
        assert spare.take() is None  # starts the first opening
        await asyncio.sleep(0.01)
        for _ in range(50):  # calls while it waits: the pool serves them, nothing opens
            assert spare.take() is None
            await asyncio.sleep(0)
        assert attempts == 1
        await asyncio.sleep(0.25)
        assert spare.take() is None  # waited long enough: one more opening
        await asyncio.sleep(0.01)
        assert attempts == 2
    finally:
        await spare.close()
