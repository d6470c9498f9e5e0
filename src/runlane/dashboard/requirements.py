"""The dashboard's optional dependencies: a missing one is a clear configuration error."""

from __future__ import annotations

import importlib.util

from runlane import ErrorCode, RunlaneError

#: Import names of what ``runlane[dashboard]`` installs.
EXTRA_MODULES = ("starlette", "uvicorn", "jinja2", "python_multipart", "prometheus_client")


def require_extra() -> None:
    """Raise CONFIGURATION_INVALID naming the install line unless every module is present."""
    missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            f"the dashboard needs {', '.join(missing)}; install it with "
            "pip install 'runlane[dashboard]'.",
            meta={"missing": missing},
        )
