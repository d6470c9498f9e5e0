"""The SQLite driver: one file, zero set-up, several processes may share it."""

from runlane.storage.sqlite.driver import SqliteStorage

__all__ = ["SqliteStorage"]
