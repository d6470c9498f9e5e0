"""Find the user's runtime from an import path such as ``myapp.jobs:rl``."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any

from runlane.core.runtime import Runlane
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error

#: The environment variable surfaces read when no import path is given.
APP_ENV_VAR = "RUNLANE_APP"

_EXAMPLE = "myapp.jobs:rl"


def load_runtime(import_path: str) -> Runlane:
    """Import ``module:attribute`` and return the :class:`Runlane` it names.

    The attribute may be a runtime or a function taking no arguments that
    returns one (a factory). The current directory is put on ``sys.path`` first,
    so an app next to where the command runs is found without installing it.
    Dotted attributes (``myapp.jobs:container.rl``) are followed.

    >>> rl = load_runtime("myapp.jobs:rl")
    """
    module_name, attribute = _split(import_path)
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    module = _import(module_name, import_path)
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise configuration_error(
                f"app {import_path!r}: module {module_name!r} has no attribute {attribute!r}.",
                import_path=import_path,
            ) from None
    if isinstance(target, Runlane):
        return target
    if callable(target):
        produced = _call_factory(target, import_path)
        if isinstance(produced, Runlane):
            return produced
        raise configuration_error(
            f"app {import_path!r}: the factory returned {type(produced).__name__}, "
            "not a Runlane runtime.",
            import_path=import_path,
        )
    raise configuration_error(
        f"app {import_path!r} is a {type(target).__name__}; point it at a Runlane runtime "
        "or at a function that returns one.",
        import_path=import_path,
    )


def _call_factory(factory: Any, import_path: str) -> Any:
    try:
        return factory()
    except RunlaneError:
        raise
    except Exception as error:
        raise _app_code_failed(import_path, "calling the factory", error) from error


def _split(import_path: object) -> tuple[str, str]:
    if not isinstance(import_path, str) or not import_path.strip():
        raise configuration_error(
            f"no app given; pass an import path such as {_EXAMPLE!r} or set {APP_ENV_VAR}."
        )
    module_name, colon, attribute = import_path.strip().partition(":")
    if not colon or not module_name or not attribute:
        raise configuration_error(
            f"app {import_path!r} is not an import path of the form module:attribute "
            f"(for example {_EXAMPLE!r}).",
            import_path=import_path,
        )
    return module_name, attribute


def _import(module_name: str, import_path: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except RunlaneError:
        raise  # the app's own definitions are invalid: that message is the useful one
    except ModuleNotFoundError as error:
        if error.name is not None and _is_same_or_parent(error.name, module_name):
            raise configuration_error(
                f"app {import_path!r}: no module named {module_name!r} "
                f"(searched the current directory {os.getcwd()!r} and the installed packages).",
                import_path=import_path,
            ) from None
        raise _app_code_failed(import_path, f"importing {module_name!r}", error) from error
    except Exception as error:
        raise _app_code_failed(import_path, f"importing {module_name!r}", error) from error


def _is_same_or_parent(missing: str, module_name: str) -> bool:
    return module_name == missing or module_name.startswith(missing + ".")


def _app_code_failed(import_path: str, doing: str, error: Exception) -> RunlaneError:
    # The user's own code failed: its exception text is theirs and is what they need to see.
    return RunlaneError(
        ErrorCode.CONFIGURATION_INVALID,
        f"app {import_path!r}: {doing} raised {type(error).__name__}: {error}",
        meta={"import_path": import_path, "exception": type(error).__name__},
    )
