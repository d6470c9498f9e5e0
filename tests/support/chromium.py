"""Finding the system Chromium the browser tests drive (Debian's ``chromium`` package).

Playwright never downloads a browser here: the tests launch the installed one
with ``executable_path``. When it is missing the tests skip loudly, and under
``CI=true`` they fail instead, so a missing browser is never hidden (``.ci/run``
installs it when it can).
"""

from __future__ import annotations

import os
import shutil

import pytest


def chromium_executable() -> str:
    """The path of ``chromium``, or skip (fail under CI) when it is not installed."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = (
            "browser tests need Chromium and none is installed "
            "(apt-get install -y --no-install-recommends chromium)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: a skip would hide the missing browser)")
        pytest.skip(message)
    return path
