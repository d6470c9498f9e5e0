"""The ``runlane`` command answers bad arguments with one clear line, never a traceback."""

from __future__ import annotations

import json
import os

import pytest
from tests.e2e.runner import Cli

APP = "app:rl"
#: What a shell hands Python for the bytes ``run-\xff``: not UTF-8.
NOT_UTF8 = os.fsdecode(b"run-\xff")


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "Error:" not in stderr.replace("error[", "")


@pytest.mark.parametrize(
    "args",
    [
        ("runs", "show", APP, NOT_UTF8),
        ("runs", "cancel", APP, NOT_UTF8),
        ("trigger", APP, "greet", "--payload", json.dumps({"name": NOT_UTF8[:4]}) + NOT_UTF8),
    ],
    ids=["runs-show", "runs-cancel", "trigger-payload"],
)
def test_an_argument_that_is_not_utf8_is_a_usage_error(cli: Cli, args: tuple[str, ...]) -> None:
    done = cli.run(*args, expect=2)
    assert "is not valid UTF-8" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_payload_nested_too_deeply_is_a_usage_error(cli: Cli) -> None:
    deep = "[" * 10_000 + "]" * 10_000
    done = cli.run("trigger", APP, "greet", "--payload", deep, expect=2)
    assert "nested too deeply" in done.stderr and "Traceback" not in done.stderr
    over_cap = "[" * 65 + "]" * 65
    refused = cli.run("trigger", APP, "greet", "--payload", over_cap, expect=1)
    assert refused.stderr.startswith("error[payload_invalid]: ")
    assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("cursor", ["!!!!", "====", "AAAA"])
def test_a_malformed_cursor_fails_with_a_clear_message(cli: Cli, cursor: str) -> None:
    cli.run("trigger", APP, "greet", "--payload", '{"name": "Ada"}')
    done = cli.run("runs", "list", APP, "--cursor", cursor, expect=1)
    assert done.stderr.startswith("error[configuration_invalid]: cursor ")
    assert "no runs match" not in done.stdout and "Traceback" not in done.stderr
