"""A throwaway Ministack (local AWS emulator from PyPI) for the SQS tests.

``MinistackServer`` starts ``python -m ministack`` on a free loopback port with
its state, logs and pid file in a private temporary directory, waits for its
health endpoint, and stops it again (also at interpreter exit). State survives
``stop()`` / ``start()`` on the same server object (the emulator persists it on
shutdown), so tests can take SQS away and bring it back.

Test modules pull the fixtures in by name::

    pytest_plugins = ["tests.support.ministack"]

One server serves the whole pytest session, however many modules import the
fixtures. When the emulator cannot run, tests skip with the reason, or fail
under ``CI=true`` so a missing service is never hidden.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

__all__ = [
    "REGION",
    "MinistackServer",
    "MinistackUnavailable",
    "aws_client",
    "lambda_client",
    "ministack_endpoint",
    "ministack_server",
    "sns_client",
    "sqs_client",
    "sqs_queue_factory",
]

REGION = "us-east-1"
#: Dummy credentials; the emulator maps them to its default account 000000000000.
CREDENTIALS = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}
_HEALTH_PATH = "/_ministack/health"
_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0
_PORT_ATTEMPTS = 3
_LOG_TAIL_CHARS = 3_000


class MinistackUnavailable(RuntimeError):
    """The emulator cannot be started here."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MinistackServer:
    """One emulator process on ``127.0.0.1:<port>``; ``endpoint`` is its base URL."""

    def __init__(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="runlane-ministack-"))
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        atexit.register(self.close)

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>`` of the running server."""
        if self._port is None:
            raise RuntimeError("the Ministack server has not been started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def log_path(self) -> Path:
        """Where the server writes its output."""
        return self._workdir / "ministack.log"

    def start(self) -> None:
        """Start (or restart on the same port) and wait until the health endpoint answers."""
        if self._process is not None and self._process.poll() is None:
            return
        if importlib.util.find_spec("ministack") is None:
            raise MinistackUnavailable(
                "the 'ministack' package is not installed (pip install ministack)"
            )
        last_error = "no attempt made"
        for _ in range(_PORT_ATTEMPTS if self._port is None else 1):
            port = self._port or _free_port()
            try:
                self._launch(port)
                self._port = port
                return
            except MinistackUnavailable as error:
                last_error = error.reason
        raise MinistackUnavailable(last_error)

    def stop(self) -> None:
        """Stop the server gracefully (it saves its state), killing it if it hangs."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        # Lambda workers the emulator spawned share its process group; end them too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)

    def close(self) -> None:
        """Stop the server and delete its private directory."""
        self.stop()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def _launch(self, port: int) -> None:
        env = {
            **{key: value for key, value in os.environ.items() if not key.startswith("AWS_")},
            "GATEWAY_PORT": str(port),
            "BIND_HOST": "127.0.0.1",
            "MINISTACK_HOST": "127.0.0.1",
            "LOG_LEVEL": "WARNING",
            "LAMBDA_EXECUTOR": "local",
            "PERSIST_STATE": "1",
            "STATE_DIR": str(self._workdir / "state"),
            "S3_DATA_DIR": str(self._workdir / "s3"),
            "TMPDIR": str(self._workdir),
        }
        log = self.log_path.open("ab")
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "ministack"],
                cwd=self._workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise MinistackUnavailable(
                    f"ministack exited with code {process.returncode}: {self._log_tail()}"
                )
            if _healthy(f"http://127.0.0.1:{port}{_HEALTH_PATH}"):
                self._process = process
                return
            time.sleep(0.1)
        process.kill()
        process.wait()
        raise MinistackUnavailable(
            f"ministack did not answer {_HEALTH_PATH} within {_START_TIMEOUT_S:.0f}s: "
            f"{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        return "(no log)"


def aws_client(service: str, endpoint: str, *, max_attempts: int = 2) -> Any:
    """A real boto3 client for ``service`` on the emulator (dummy credentials, us-east-1)."""
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        config=Config(
            retries={"max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=2,
            read_timeout=30,
        ),
        **CREDENTIALS,
    )


_shared: MinistackServer | None = None
_shared_lock = threading.Lock()


def _shared_server() -> MinistackServer:
    # Fixtures imported into several modules are separate fixture definitions;
    # this keeps them on one process for the whole session.
    global _shared
    with _shared_lock:
        if _shared is None:
            server = MinistackServer()
            server.start()
            _shared = server
        return _shared


@pytest.fixture(scope="session")
def ministack_server() -> MinistackServer:
    """The session's emulator process (skip, or fail under CI=true, if it cannot run)."""
    try:
        return _shared_server()
    except MinistackUnavailable as error:
        message = f"the SQS tests need Ministack and it could not be started: {error.reason}"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: a skip would hide the missing service)")
        pytest.skip(message)


@pytest.fixture(scope="session")
def ministack_endpoint(ministack_server: MinistackServer) -> str:
    """Base URL of the running emulator, e.g. ``http://127.0.0.1:41234``."""
    ministack_server.start()
    return ministack_server.endpoint


@pytest.fixture(scope="session")
def sqs_client(ministack_endpoint: str) -> Any:
    """A real boto3 SQS client pointed at the emulator."""
    return aws_client("sqs", ministack_endpoint)


@pytest.fixture(scope="session")
def sns_client(ministack_endpoint: str) -> Any:
    """A real boto3 SNS client pointed at the emulator."""
    return aws_client("sns", ministack_endpoint)


@pytest.fixture(scope="session")
def lambda_client(ministack_endpoint: str) -> Any:
    """A real boto3 Lambda client pointed at the emulator."""
    return aws_client("lambda", ministack_endpoint)


SqsQueueFactory = Callable[..., str]


@pytest.fixture
def sqs_queue_factory(sqs_client: Any) -> Iterator[SqsQueueFactory]:
    """``make(prefix, fifo=False, **attributes) -> queue_url``: fresh uniquely named queues."""
    created: list[str] = []

    def make(prefix: str = "runlane-test", *, fifo: bool = False, **attributes: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}" + (".fifo" if fifo else "")
        if fifo:
            attributes["FifoQueue"] = "true"
        url = str(sqs_client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])
        created.append(url)
        return url

    yield make
    for url in created:
        with contextlib.suppress(Exception):
            sqs_client.delete_queue(QueueUrl=url)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False
