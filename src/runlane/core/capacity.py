"""Deprecated: moved to :mod:`runlane.model.capacity`"""

from runlane.types.moved import forward

__getattr__ = forward(__name__, "runlane.model.capacity")
