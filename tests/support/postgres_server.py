"""Throwaway PostgreSQL cluster for the test suite.

``PostgresServer`` runs ``initdb`` into a fresh temporary directory, starts a
postmaster on a free loopback TCP port and tears everything down again on
``stop()`` (also registered with :mod:`atexit`, so an interrupted test run
does not leave a server behind).  It never touches a system PostgreSQL.

Typical use::

    with PostgresServer() as pg:
        dsn = pg.create_database("runlane_test")
        ...
        pg.restart()  # simulate a database restart mid-run

When the binaries are missing (or the process runs as root and there is no
unprivileged ``postgres`` user to run them as), ``PostgresUnavailable`` is
raised so callers can skip; any other start failure raises
``PostgresServerError`` with the tail of the server log.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import psycopg
import pytest
from psycopg import sql

__all__ = [
    "SUPERUSER",
    "PostgresServer",
    "PostgresServerError",
    "PostgresUnavailable",
    "find_postgres_bindir",
]

SUPERUSER = "runlane"
"""Name of the (trust-authenticated) superuser created by ``initdb``."""

_UNPRIVILEGED_USER = "postgres"
_SYSTEM_BINDIRS = Path("/usr/lib/postgresql")
_START_TIMEOUT_S = 30
_PORT_ATTEMPTS = 3
_LOG_TAIL_LINES = 40
_PORT_CLASH = re.compile(
    r"could not bind|address already in use|could not create any TCP/IP",
    re.IGNORECASE,
)


class PostgresServerError(RuntimeError):
    """The throwaway cluster could not be initialised, started or controlled."""


class PostgresUnavailable(PostgresServerError):
    """PostgreSQL cannot be run here at all (e.g. binaries not installed)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.name)) or (-1,)


def find_postgres_bindir() -> Path:
    """Return a directory holding both ``initdb`` and ``pg_ctl``.

    ``PATH`` is searched first; otherwise the highest version under
    ``/usr/lib/postgresql/*/bin`` is used.
    """
    initdb = shutil.which("initdb")
    if initdb is not None:
        # Resolve symlinks (e.g. /usr/local/bin -> /usr/lib/postgresql/N/bin)
        # so initdb and pg_ctl come from the same installation.
        for candidate in (Path(initdb).resolve().parent, Path(initdb).parent):
            if _has_binaries(candidate):
                return candidate
    if _SYSTEM_BINDIRS.is_dir():
        versions = sorted(
            (d for d in _SYSTEM_BINDIRS.iterdir() if _has_binaries(d / "bin")),
            key=_version_key,
            reverse=True,
        )
        if versions:
            return versions[0] / "bin"
    raise PostgresUnavailable(f"initdb/pg_ctl not found on PATH or under {_SYSTEM_BINDIRS}/*/bin")


def _has_binaries(bindir: Path) -> bool:
    return all(os.access(bindir / name, os.X_OK) for name in ("initdb", "pg_ctl"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<could not read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:]) or "<empty log>"


class PostgresServer:
    """A private PostgreSQL cluster in a temp dir, listening on 127.0.0.1."""

    def __init__(self, *, bindir: Path | None = None) -> None:
        self._bindir_override = bindir
        self._bindir: Path | None = None
        self._base_dir: Path | None = None
        self._port: int | None = None
        self._running = False
        self._run_as: tuple[str, str] | None = None  # (runuser path, user)
        self._atexit_registered = False

    # ------------------------------------------------------------------ API

    @property
    def port(self) -> int:
        if self._port is None or not self._running:
            raise PostgresServerError("PostgresServer is not running")
        return self._port

    @property
    def dsn(self) -> str:
        """libpq URL for the ``postgres`` maintenance database."""
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        """libpq URL for ``database`` on this server (no existence check)."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    @property
    def data_dir(self) -> Path:
        return self._require_base() / "data"

    @property
    def log_path(self) -> Path:
        return self._require_base() / "server.log"

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> None:
        """initdb a fresh cluster and start it; no-op if already running."""
        if self._running:
            return
        if self._bindir_override is None:
            self._bindir = find_postgres_bindir()
        elif _has_binaries(self._bindir_override):
            self._bindir = self._bindir_override
        else:
            raise PostgresUnavailable(f"no initdb/pg_ctl in {self._bindir_override}")
        self._run_as = self._unprivileged_user()
        self._base_dir = self._make_base_dir()
        if not self._atexit_registered:
            atexit.register(self._stop_at_exit)
            self._atexit_registered = True
        try:
            self._initdb()
            self._start_on_free_port()
        except BaseException:
            self._teardown(force=True)
            raise
        self._running = True

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m MODE``: same data dir and port, all sessions dropped
        (``immediate`` skips the shutdown checkpoint: the server recovers from its WAL)."""
        if not self._running:
            raise PostgresServerError("PostgresServer is not running")
        result = self._pg_ctl("-m", mode, "-o", self._server_options(self.port), "restart")
        if result.returncode != 0:
            raise PostgresServerError(self._failure("pg_ctl restart", result))

    def halt(self, mode: str = "fast") -> None:
        """Stop the server but keep its data dir and port, for :meth:`resume`: an outage."""
        if not self._running:
            raise PostgresServerError("PostgresServer is not running")
        result = self._pg_ctl("-m", mode, "stop")
        if result.returncode != 0:
            raise PostgresServerError(self._failure("pg_ctl stop", result))

    def resume(self) -> None:
        """Start the server :meth:`halt` stopped, on the same port."""
        if not self._running:
            raise PostgresServerError("PostgresServer is not running")
        result = self._pg_ctl("-o", self._server_options(self.port), "start")
        if result.returncode != 0:
            raise PostgresServerError(self._failure("pg_ctl start", result))

    def stop(self) -> None:
        """Stop the server and delete its directory. Safe to call repeatedly."""
        self._teardown(force=False)
        if self._atexit_registered:
            atexit.unregister(self._stop_at_exit)
            self._atexit_registered = False

    def create_database(self, name: str) -> str:
        """(Re)create database ``name`` empty and return a DSN for it."""
        ident = sql.Identifier(name)
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
        return self.dsn_for(name)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port={self._port}" if self._running else "stopped"
        return f"<PostgresServer {state} dir={self._base_dir}>"

    # ------------------------------------------------------------ internals

    def _require_base(self) -> Path:
        if self._base_dir is None:
            raise PostgresServerError("PostgresServer has not been started")
        return self._base_dir

    @staticmethod
    def _unprivileged_user() -> tuple[str, str] | None:
        """PostgreSQL refuses to run as root; pick the user to run it as."""
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam(_UNPRIVILEGED_USER)
        except KeyError:
            raise PostgresUnavailable(
                f"running as root and there is no {_UNPRIVILEGED_USER!r} system user "
                "to run PostgreSQL as (PostgreSQL refuses to run as root)"
            ) from None
        runuser = shutil.which("runuser")
        if runuser is None:
            raise PostgresUnavailable("running as root but `runuser` is not available")
        return runuser, _UNPRIVILEGED_USER

    def _make_base_dir(self) -> Path:
        if self._run_as is None:
            return Path(tempfile.mkdtemp(prefix="runlane-pg-"))
        # The unprivileged user must be able to traverse to the directory:
        # /tmp is world-traversable, unlike e.g. /root or a private TMPDIR.
        base = Path(tempfile.mkdtemp(prefix="runlane-pg-", dir="/tmp"))
        entry = pwd.getpwnam(self._run_as[1])
        os.chown(base, entry.pw_uid, entry.pw_gid)
        base.chmod(0o755)
        return base

    def _command(self, binary: str, *args: str) -> list[str]:
        assert self._bindir is not None
        cmd = [str(self._bindir / binary), *args]
        if self._run_as is not None:
            runuser, user = self._run_as
            cmd = [runuser, "-u", user, "--", *cmd]
        return cmd

    def _run(self, cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        return subprocess.run(
            list(cmd),
            cwd=self._require_base(),  # the unprivileged user may not reach our cwd
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )

    def _initdb(self) -> None:
        result = self._run(
            self._command(
                "initdb",
                "-D", str(self.data_dir),
                "--auth=trust",
                "-U", SUPERUSER,
                "--no-sync",
                "--locale=C",
                "--encoding=UTF8",
            )
        )  # fmt: skip
        if result.returncode != 0:
            raise PostgresServerError(self._failure("initdb", result, with_log=False))

    def _server_options(self, port: int) -> str:
        sock_dir = shlex.quote(str(self._require_base()))
        return (
            f"-c listen_addresses=127.0.0.1 -p {port}"
            f" -c unix_socket_directories={sock_dir}"
            " -c fsync=on -c max_connections=200 -c shared_buffers=128MB"
        )

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run(
            self._command(
                "pg_ctl",
                "-w",
                "-t", str(_START_TIMEOUT_S),
                "-D", str(self.data_dir),
                "-l", str(self.log_path),
                *args,
            )
        )  # fmt: skip

    def _start_on_free_port(self) -> None:
        # Another process may grab the probed port before the postmaster
        # binds it; retry with a new one in that (rare) case.
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            port = _free_port()
            log_offset = self._log_size()
            result = self._pg_ctl("-o", self._server_options(port), "start")
            if result.returncode == 0:
                self._port = port
                return
            fresh_log = self._log_text()[log_offset:]
            if attempt < _PORT_ATTEMPTS and _PORT_CLASH.search(fresh_log):
                self._pg_ctl("-m", "immediate", "stop")
                continue
            raise PostgresServerError(self._failure("pg_ctl start", result))
        raise AssertionError("unreachable")

    def _log_size(self) -> int:
        return len(self._log_text())

    def _log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def _failure(
        self,
        what: str,
        result: subprocess.CompletedProcess[str],
        *,
        with_log: bool = True,
    ) -> str:
        parts = [f"{what} failed (exit {result.returncode}): {shlex.join(result.args)}"]
        for label, text in (("stdout", result.stdout), ("stderr", result.stderr)):
            if text.strip():
                parts.append(f"--- {label} ---\n{text.strip()}")
        if with_log:
            parts.append(f"--- tail of {self.log_path} ---\n{_tail(self.log_path)}")
        return "\n".join(parts)

    def _teardown(self, *, force: bool) -> None:
        base = self._base_dir
        if base is None:
            return
        try:
            if (self.data_dir / "postmaster.pid").exists():
                mode = "immediate" if force else "fast"
                result = self._pg_ctl("-m", mode, "stop")
                if result.returncode != 0 and not force:
                    self._pg_ctl("-m", "immediate", "stop")
        finally:
            self._running = False
            self._port = None
            self._base_dir = None
            shutil.rmtree(base, ignore_errors=True)

    def _stop_at_exit(self) -> None:
        self._atexit_registered = False  # atexit is consuming the registration
        self._teardown(force=False)


def postgres_missing(reason: str) -> None:
    """Skip loudly; under ``CI=true`` fail instead, so a missing server is never hidden."""
    message = f"PostgreSQL tests need a server and none could be started: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: a skip would hide the missing service)")
    pytest.skip(message)


@contextlib.contextmanager
def bench_database(name: str, dsn: str | None = None) -> Iterator[str]:
    """The PostgreSQL a benchmark uses: ``dsn`` if given, else
    ``RUNLANE_BENCH_DATABASE_URL``, else database ``name`` on a throwaway server
    that stops when the block ends."""
    given = dsn or os.environ.get("RUNLANE_BENCH_DATABASE_URL")
    if given:
        yield given
        return
    with PostgresServer() as server:
        yield server.create_database(name)
