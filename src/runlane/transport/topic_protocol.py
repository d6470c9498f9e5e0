"""Deprecated: moved to :mod:`runlane.ports.topic_transport`"""

from runlane.types.moved import forward

__getattr__ = forward(__name__, "runlane.ports.topic_transport")
