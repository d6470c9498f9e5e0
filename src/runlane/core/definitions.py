"""Deprecated: moved to :mod:`runlane.model.definitions`"""

from runlane.types.moved import forward

__getattr__ = forward(__name__, "runlane.model.definitions")
