"""Every storage driver passes the topics conformance suite (see ``runlane.testing``)."""

from runlane.testing.conformance.topics import *  # noqa: F403
