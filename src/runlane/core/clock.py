"""Deprecated: moved to :mod:`runlane.types.clock`"""

from runlane.types.moved import forward

__getattr__ = forward(__name__, "runlane.types.clock")
