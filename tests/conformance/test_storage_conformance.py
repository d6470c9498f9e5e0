"""Every storage driver passes the shared conformance suite (see ``runlane.testing``)."""

from runlane.testing.conformance.storage import *  # noqa: F403
