"""Typed tasks under mypy: a schema task's payload type, and lane builders' options."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
from mypy import api

SNIPPET = textwrap.dedent(
    """
    from typing import Any

    from pydantic import BaseModel

    from runlane import Context, Runlane, postgres_lane, sqlite_lane, task


    class Welcome(BaseModel):
        email: str


    class Invoice(BaseModel):
        number: int


    @task("emails.welcome", schema=Welcome)
    async def welcome(payload: Welcome, ctx: Context) -> None: ...


    @task("free")
    async def free(payload: Any, ctx: Context) -> None: ...


    async def produce(rl: Runlane) -> None:
        reveal_type(welcome)  # note: TaskDef[Welcome]
        await rl.trigger(welcome, Welcome(email="a@example.com"))
        await rl.trigger(welcome, {"email": "a@example.com"})
        await rl.trigger(free, 42)
        await rl.trigger("emails.welcome", Invoice(number=1))
        await rl.trigger_many(welcome, [Welcome(email="a@example.com")])
        await rl.trigger_many(welcome, [{"email": "a@example.com"}])
        mixed: list[Welcome | dict[str, str]] = [Welcome(email="a@example.com"), {"email": "b"}]
        await rl.trigger_many(welcome, mixed)
        rl.sync.trigger(welcome, {"email": "a@example.com"})
        sqlite_lane("app.db", busy_timeout_ms=100)
        postgres_lane("postgresql://db/app", schema="jobs", max_size=3)
        await rl.trigger(welcome, Invoice(number=1))  # error: misc
        await rl.trigger_many(welcome, [Invoice(number=1)])  # error: misc
        rl.sync.trigger(welcome, Invoice(number=1))  # error: misc
        sqlite_lane("app.db", max_sise=3)  # error: call-arg
        postgres_lane("postgresql://db/app", max_sise=3)  # error: call-arg
    """
)


def _expected(marker: str) -> dict[int, str]:
    """Line number -> what the snippet's ``# marker: ...`` comment on that line says."""
    found = {}
    for number, line in enumerate(SNIPPET.splitlines(), start=1):
        if f"# {marker}: " in line:
            found[number] = line.split(f"# {marker}: ")[1]
    return found


@pytest.mark.slow
def test_mypy_accepts_a_schema_or_a_mapping_and_rejects_other_payloads_and_unknown_options(
    tmp_path: Path,
) -> None:
    snippet = tmp_path / "producer.py"
    snippet.write_text(SNIPPET)

    # mypy raises the interpreter's recursion limit for itself and leaves it raised;
    # tests run after this one rely on the default (a too-deep payload must fail to decode).
    limit = sys.getrecursionlimit()
    try:
        out, err, _ = api.run(
            [str(snippet), "--strict", "--show-error-codes", "--cache-dir", str(tmp_path / "cache")]
        )
    finally:
        sys.setrecursionlimit(limit)

    reported = re.findall(r"producer\.py:(\d+): (error|note): (.*)", out)
    errors = {int(line): text for line, kind, text in reported if kind == "error"}
    notes = {int(line): text for line, kind, text in reported if kind == "note"}
    assert errors.keys() == _expected("error").keys(), out + err
    for line, code in _expected("error").items():
        assert errors[line].endswith(f"[{code}]"), errors[line]
    # The payload's type conflicts with the one the task's schema fixed.
    assert 'Cannot infer value of type parameter "P" of "trigger"' in errors[min(errors)]
    assert 'Unexpected keyword argument "max_sise"' in errors[max(errors)]
    ((line, note),) = [(n, t) for n, t in notes.items() if "Revealed type" in t]
    assert _expected("note") == {line: "TaskDef[Welcome]"}
    assert 'runlane.model.definitions.TaskDef[producer.Welcome]"' in note
