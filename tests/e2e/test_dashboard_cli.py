"""``runlane dashboard`` as a command: start line, token from the environment, clean exit."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.e2e.dashboard_process import running_dashboard
from tests.e2e.runner import Cli

pytestmark = pytest.mark.slow

TOKEN = "cli-op-token-93d2"


def _get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_without_a_token_it_serves_read_only_and_stops_cleanly_on_sigterm(
    tmp_path: Path,
) -> None:
    with running_dashboard(tmp_path) as served:
        status, body = _get(served.url + "api/overview")
        refused, _ = _get(
            served.url + f"api/runs/{served.seeded.failed_charge}/retry",
            headers={"Authorization": "Bearer anything"},
            method="POST",
        )
        line = served.url
        exit_status, stderr = served.stop()

    assert line.startswith("http://127.0.0.1:") and line.endswith("/")
    assert status == 200 and json.loads(body)["read_only"] is True
    assert refused == 403
    assert exit_status == 0, stderr


def test_the_token_comes_from_the_environment_and_enables_the_bearer_api(
    tmp_path: Path,
) -> None:
    with running_dashboard(
        tmp_path, "--root-path", "/ops", env={"RUNLANE_DASHBOARD_TOKEN": TOKEN}
    ) as served:
        status, body = _get(
            served.url + f"api/runs/{served.seeded.failed_charge}/retry",
            headers={"Authorization": f"Bearer {TOKEN}"},
            method="POST",
        )
        overview, _ = _get(served.url)
        exit_status, stderr = served.stop()

    assert served.url.endswith("/ops/")
    assert status == 200, body
    assert json.loads(body)["run"]["source"]["run_id"] == served.seeded.failed_charge
    assert overview == 200
    assert exit_status == 0 and TOKEN not in stderr


def test_a_token_env_naming_an_unset_variable_is_a_clear_error(cli: Cli) -> None:
    failed = cli.run("dashboard", "app:rl", "--token-env", "NO_SUCH_TOKEN_VAR", expect=1)

    assert "error[configuration_invalid]" in failed.stderr
    assert "NO_SUCH_TOKEN_VAR" in failed.stderr


def test_a_port_already_in_use_is_a_clear_error(cli: Cli) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        failed = cli.run("dashboard", "app:rl", "--port", str(port), expect=1)

    assert "cannot listen on 127.0.0.1" in failed.stderr and "--port" in failed.stderr
