"""Old import paths kept for one release after the packages became layers.

A module that moved leaves a stub at its old path; the stub warns once, when it is
imported, and hands every name on to the module's new home. Nothing inside Runlane
imports a stub (an import contract says so).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def forward(old: str, new: str) -> Callable[[str], Any]:
    """Warn that ``old`` moved to ``new`` and return a module ``__getattr__`` for ``old``.

    Example, as the whole body of the stub at the old path::

        __getattr__ = forward(__name__, "runlane.ports.storage")
    """
    warnings.warn(
        f"{old} moved to {new}; import from {new} (the old path goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )

    def __getattr__(name: str) -> Any:
        return getattr(importlib.import_module(new), name)

    return __getattr__
