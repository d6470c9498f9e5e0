"""Deprecated: moved to :mod:`runlane.model.schedule_defs`"""

from runlane.types.moved import forward

__getattr__ = forward(__name__, "runlane.model.schedule_defs")
