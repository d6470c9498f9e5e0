"""The ``runlane`` CLI with bad arguments: a non-zero exit, one error line, no traceback.

Whatever an operator types — an unknown task or queue, a payload that is not
JSON or that JSON cannot hold, a duration that is no duration, a run id or cursor
that cannot exist, bytes that are not UTF-8 — the command refuses it the way it
refuses everything else: exit 1 with ``error[code]: message`` (a typed error) or
exit 2 with click's usage block ending in one ``Error:`` line, nothing on stdout,
and never a Python traceback.
"""

from __future__ import annotations

import subprocess

import pytest
from tests.e2e.runner import COMMAND_TIMEOUT, Cli, clean_environment, runlane_command

APP = "app:rl"
USAGE = "usage"


def run(cli: Cli, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    """Run the CLI with arguments that may be raw bytes (as a shell passes them)."""
    return subprocess.run(
        [*runlane_command(), *args],
        cwd=cli.cwd,
        env=clean_environment(),
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def assert_refused(done: subprocess.CompletedProcess[bytes], *codes: str) -> str:
    """Refused with ``error[code]`` for one of ``codes`` (or a usage error when given USAGE).

    Returns the error line.
    """
    stderr = done.stderr.decode("utf-8", "replace")
    report = f"exit {done.returncode}\nstdout:\n{done.stdout!r}\nstderr:\n{stderr}"
    assert "Traceback" not in stderr, report
    assert done.stdout == b"", report
    lines = [line for line in stderr.splitlines() if line.strip()]
    if USAGE in codes and done.returncode == 2:
        errors = [line for line in lines if line.startswith("Error: ")]
        assert len(errors) == 1 and lines[-1] == errors[0], report
        return errors[0]
    assert done.returncode == 1, report
    assert len(lines) == 1, report
    assert lines[0].startswith(tuple(f"error[{code}]: " for code in codes)), report
    return lines[0]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("trigger", APP, "no.such.task"), "task_not_found"),
        (("trigger", APP, ""), "task_not_found"),
        (("trigger", APP, "greet", "--queue", "nowhere"), "queue_not_found"),
        (("runs", "list", APP, "--queue", "nowhere"), "queue_not_found"),
        (("schedules", "pause", APP, "no.such.schedule"), "schedule_not_found"),
    ],
)
def test_unknown_names_are_typed_not_found_errors(
    cli: Cli, args: tuple[str, ...], code: str
) -> None:
    assert_refused(run(cli, *args), code)


@pytest.mark.parametrize(
    "payload",
    [
        "{not json",
        "",
        "[1, 2",
        '{"name": "Ada"} trailing',
    ],
)
def test_a_payload_that_is_not_json_is_a_usage_error(cli: Cli, payload: str) -> None:
    line = assert_refused(run(cli, "trigger", APP, "greet", "--payload", payload), USAGE)
    assert "--payload" in line and "not valid JSON" in line


@pytest.mark.parametrize(
    "payload",
    [
        '{"name": NaN}',
        '{"name": Infinity}',
        "1e400",
        '"\\ud800"',
        '{"name": "\\u0000"}',
    ],
)
def test_json_the_store_cannot_keep_is_payload_invalid(cli: Cli, payload: str) -> None:
    assert_refused(run(cli, "trigger", APP, "greet", "--payload", payload), "payload_invalid")
    assert "no runs match" in run(cli, "runs", "list", APP).stdout.decode()


@pytest.mark.parametrize(
    "args",
    [
        ("trigger", APP, "greet", "--delay", "soon"),
        ("trigger", APP, "greet", "--delay", "-5s"),
        ("trigger", APP, "greet", "--delay", "nan"),
        ("trigger", APP, "greet", "--delay", "inf"),
        ("trigger", APP, "greet", "--delay", "1e400"),
        ("trigger", APP, "greet", "--delay", "10 parsecs"),
        ("runs", "prune", APP, "--older-than", "-1d"),
        ("runs", "prune", APP, "--older-than", "yesterday"),
        ("worker", APP, "--drain", "--lease", "forever"),
        ("tick", APP, "--every", "often"),
    ],
)
def test_bad_durations_are_usage_errors_naming_the_option(cli: Cli, args: tuple[str, ...]) -> None:
    line = assert_refused(run(cli, *args), USAGE)
    assert f"'{args[-2]}'" in line


@pytest.mark.parametrize(
    ("command", "run_id"),
    [
        ("show", "no-such-run"),
        ("events", "run_" + "0" * 5_000),
        ("cancel", " "),
        ("retry", "run\nid"),
        ("rerun", "../../etc/passwd"),
    ],
)
def test_run_ids_that_name_no_run_are_not_found(cli: Cli, command: str, run_id: str) -> None:
    assert_refused(run(cli, "runs", command, APP, run_id), "run_not_found")


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "many"])
def test_a_bad_page_size_is_a_usage_error(cli: Cli, limit: str) -> None:
    line = assert_refused(run(cli, "runs", "list", APP, "--limit", limit), USAGE)
    assert "'--limit'" in line


@pytest.mark.parametrize("cursor", ["!!!!", "====", "not-a-cursor", "eyJ4IjoxfQ", ""])
def test_a_malformed_cursor_is_a_typed_error_not_an_empty_page(cli: Cli, cursor: str) -> None:
    run(cli, "trigger", APP, "greet", "--payload", '{"name": "Ada"}')
    assert_refused(run(cli, "runs", "list", APP, "--cursor", cursor), "configuration_invalid")


@pytest.mark.parametrize(
    ("args", "not_found"),
    [
        (("runs", "show", APP, b"run_\xff\xfe"), "run_not_found"),
        (("runs", "cancel", APP, b"\xc3\x28"), "run_not_found"),
        (("trigger", APP, b"greet\xff"), "task_not_found"),
        (("trigger", APP, "greet", "--queue", b"main\x80"), "queue_not_found"),
        (("schedules", "pause", APP, b"\xed\xa0\x80"), "schedule_not_found"),
        (("runs", "list", APP, "--cursor", b"\xff"), "configuration_invalid"),
    ],
)
def test_arguments_that_are_not_utf8_are_refused_without_a_traceback(
    cli: Cli, args: tuple[str | bytes, ...], not_found: str
) -> None:
    # Either answer is fine: the name cannot exist, or the argument is not text.
    assert_refused(run(cli, *args), not_found, "configuration_invalid", USAGE)
