"""Deprecated: moved to :mod:`runlane.ports.storage`"""

from runlane.types.moved import forward

__getattr__ = forward(__name__, "runlane.ports.storage")
