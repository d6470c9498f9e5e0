"""bind_none_directly: a faster path for binding None that binds the same NULL."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_none_still_binds_null() -> None:
    # In a fresh interpreter: in this one a lane opened by another test may have
    # registered the adapter already.
    script = textwrap.dedent(
        """
        import sqlite3
        from runlane.storage.sqlite.connections import bind_none_directly

        key = (type(None), sqlite3.PrepareProtocol)
        assert key not in sqlite3.adapters
        bind_none_directly()
        assert sqlite3.adapters[key](None) is None
        conn = sqlite3.connect(":memory:")
        row = conn.execute("SELECT :v IS NULL, typeof(:v)", {"v": None}).fetchone()
        assert row == (1, "null"), row
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_an_adapter_the_application_registered_is_kept() -> None:
    # In a fresh interpreter: the adapter registry is process-wide.
    script = textwrap.dedent(
        """
        import sqlite3
        from runlane.storage.sqlite.connections import bind_none_directly

        def theirs(value):
            return "theirs"

        sqlite3.register_adapter(type(None), theirs)
        bind_none_directly()
        assert sqlite3.adapters[(type(None), sqlite3.PrepareProtocol)] is theirs
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)
