"""Every storage driver passes the robustness conformance suite (see ``runlane.testing``)."""

from runlane.testing.conformance.robustness import *  # noqa: F403
