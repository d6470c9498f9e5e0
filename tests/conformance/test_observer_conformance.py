"""Observers, tracebacks and attempt log lines on every storage driver."""

from runlane.testing.conformance.observing import *  # noqa: F403
