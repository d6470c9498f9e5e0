"""``runlane demo``: the first command to try on a fresh machine."""

from runlane.cli.demo.command import demo

__all__ = ["demo"]
