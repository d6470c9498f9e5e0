"""bind_none_directly: a faster path for binding None that binds the same NULL."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap

from runlane.storage.sqlite.connections import bind_none_directly


def test_none_still_binds_null() -> None:
    bind_none_directly()
    assert (type(None), sqlite3.PrepareProtocol) in sqlite3.adapters
    conn = sqlite3.connect(":memory:")
    try:
        row = conn.execute("SELECT :v IS NULL, typeof(:v)", {"v": None}).fetchone()
    finally:
        conn.close()
    assert row == (1, "null")


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
