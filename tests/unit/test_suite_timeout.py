"""The suite's own guard: a hanging test fails instead of holding CI until its limit."""

from __future__ import annotations

import pytest


def test_the_suite_runs_with_a_per_test_timeout(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.hasplugin("timeout")
    assert float(request.config.getini("timeout")) > 0


def test_a_hanging_async_test_fails_on_its_timeout(pytester: pytest.Pytester) -> None:
    # The hang a lost settle would cause: awaiting a future nobody resolves.
    pytester.makeini("[pytest]\nasyncio_mode = auto\ntimeout = 1\n")
    pytester.makepyfile(
        """
        import asyncio

        async def test_hangs():
            await asyncio.get_running_loop().create_future()
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Timeout*"])
