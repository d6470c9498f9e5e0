"""Deprecated: moved to :mod:`runlane.types.storable_text`"""

from runlane.types.moved import forward

__getattr__ = forward(__name__, "runlane.types.storable_text")
