"""Deprecated: moved to :mod:`runlane.ports.wakeup_envelope`"""

from runlane.types.moved import forward

__getattr__ = forward(__name__, "runlane.ports.wakeup_envelope")
