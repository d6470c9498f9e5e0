"""The pytest plugin as a user meets it: their app, their test file, their pytest run."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"

JOBS = '''
from pydantic import BaseModel

from runlane import Context, Runlane, queue, sqlite_lane, task

emails = queue("emails", default=True)


class Welcome(BaseModel):
    to: str


@task("emails.welcome", schema=Welcome)
async def send_welcome(payload: Welcome, ctx: Context) -> str:
    return f"sent to {payload.to}"


def sign_up(email: str) -> None:
    """App code: it triggers through the app's own runtime object."""
    rl.sync.trigger(send_welcome, {"to": email}, delay="10m")


rl = Runlane(lane=sqlite_lane("production.db"), queues=[emails], tasks=[send_welcome])
'''

ASYNC_INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""
INI = ASYNC_INI + "runlane_app = jobs:rl\n"


@pytest.fixture
def app(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(jobs=JOBS)
    pytester.makeini(INI)
    pytester.syspathinsert()
    return pytester


def test_a_users_async_test_triggers_moves_time_and_drains_on_a_test_lane(
    app: pytest.Pytester,
) -> None:
    app.makepyfile(
        test_signup="""
        import os

        from runlane import RunStatus
        from runlane.testing import assert_triggered, drain

        import jobs


        async def test_the_welcome_goes_out_ten_minutes_later(runlane_runtime, runlane_clock):
            assert runlane_runtime is jobs.rl
            await jobs.rl.trigger(jobs.send_welcome, {"to": "ada@example.com"}, delay="10m")

            await assert_triggered(runlane_runtime, jobs.send_welcome, status="scheduled")
            assert await drain(runlane_runtime) == []
            runlane_clock.advance("10m")
            (run,) = await drain(runlane_runtime)
            assert run.status is RunStatus.SUCCEEDED and run.result == "sent to ada@example.com"


        def test_the_app_runtime_is_restored_after_the_test():
            assert jobs.rl.storage.path == os.path.abspath("production.db")
        """
    )

    result = app.runpytest()

    result.assert_outcomes(passed=2)
    assert not (app.path / "production.db").exists()


def test_a_users_sync_test_uses_the_blocking_twins_and_an_overridden_app_fixture(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(jobs=JOBS)
    pytester.makeini(ASYNC_INI)
    pytester.syspathinsert()
    pytester.makeconftest(
        """
        import pytest

        import jobs


        @pytest.fixture
        def runlane_app():
            return jobs.rl
        """
    )
    pytester.makepyfile(
        test_signup="""
        from runlane.testing.sync import assert_triggered, drain

        import jobs


        def test_signing_up_sends_a_welcome(runlane_runtime):
            jobs.sign_up("ada@example.com")

            assert_triggered(runlane_runtime, jobs.send_welcome, payload={"to": "ada@example.com"})
            (run,) = drain(runlane_runtime, advance="1h")
            assert run.result == "sent to ada@example.com"
        """
    )

    pytester.runpytest().assert_outcomes(passed=1)


def test_a_failing_assertion_tells_the_user_what_was_there(app: pytest.Pytester) -> None:
    app.makepyfile(
        test_signup="""
        from runlane.testing import assert_triggered

        import jobs


        async def test_wrong_address(runlane_runtime):
            await runlane_runtime.trigger(jobs.send_welcome, {"to": "bo@example.com"})
            await assert_triggered(
                runlane_runtime, jobs.send_welcome, payload={"to": "ada@example.com"}
            )
        """
    )

    result = app.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E*AssertionError: expected at least one run of task 'emails.welcome' with "
            "payload matching {'to': 'ada@example.com'}, found 0.",
            "E*Runs of 'emails.welcome' in this environment (1):",
            "E*-*  queued  queue=emails  payload={'to': 'bo@example.com'}",
        ]
    )


def test_the_runtime_fixture_says_how_to_point_it_at_the_app(pytester: pytest.Pytester) -> None:
    pytester.makeini(ASYNC_INI)
    pytester.makepyfile(
        test_nothing="""
        def test_needs_the_app(runlane_runtime):
            pass
        """
    )

    result = pytester.runpytest()

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*runlane_runtime does not know your runtime: set runlane_app*"])


def test_the_plugin_is_registered_by_entry_point(app: pytest.Pytester) -> None:
    result = app.runpytest_subprocess("--fixtures")

    listed = result.stdout.str().partition("fixtures defined from runlane.testing.plugin")[2]
    # Up to the next plugin's section (pytest-xdist, when installed, lists its own).
    listed = listed.partition("fixtures defined from")[0]
    names = {line.split(" --")[0] for line in listed.splitlines() if " -- " in line}
    assert names == {"runlane_app", "runlane_clock", "runlane_factory", "runlane_runtime"}


def test_importing_the_plugin_loads_no_database_driver_or_aws_sdk() -> None:
    probe = textwrap.dedent(
        """
        import sys
        import runlane.testing.plugin
        import runlane.testing.sync
        heavy = {"psycopg", "psycopg_pool", "boto3", "botocore"}
        print(sorted(heavy & {name.partition(".")[0] for name in sys.modules}))
        """
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()

    assert loaded == "[]"


def _docs_files(page: Path) -> dict[str, str]:
    """The page's code blocks whose first line names a file (``# jobs.py``), by name."""
    blocks = re.findall(r"```(?:python|toml)\n(.*?)```", page.read_text(), flags=re.DOTALL)
    return {
        block.partition("\n")[0].removeprefix("# "): block
        for block in blocks
        if re.match(r"# \w+\.py\n", block)
    }


def test_the_first_test_of_the_testing_guide_passes_as_written(pytester: pytest.Pytester) -> None:
    files = _docs_files(DOCS / "guides" / "testing.md")
    assert set(files) == {"jobs.py", "test_jobs.py"}
    for name, source in files.items():
        pytester.path.joinpath(name).write_text(source)
    pytester.makeini(INI)
    pytester.syspathinsert()

    pytester.runpytest().assert_outcomes(passed=1)
    assert not (pytester.path / "runlane.db").exists()


def test_without_the_ini_option_the_app_comes_from_runlane_app_in_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(jobs=JOBS)
    pytester.makeini(ASYNC_INI)
    pytester.syspathinsert()
    pytester.makepyfile(
        test_env="""
        import jobs


        def test_the_runtime_is_the_apps(runlane_runtime):
            assert runlane_runtime is jobs.rl
        """
    )
    monkeypatch.setenv("RUNLANE_APP", "jobs:rl")

    pytester.runpytest().assert_outcomes(passed=1)
