"""Deprecated: moved to :mod:`runlane.model.queue_defs`"""

from runlane.types.moved import forward

__getattr__ = forward(__name__, "runlane.model.queue_defs")
