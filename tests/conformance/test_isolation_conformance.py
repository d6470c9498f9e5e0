"""Every storage driver passes the isolation conformance suite (see ``runlane.testing``)."""

from runlane.testing.conformance.isolation import *  # noqa: F403
