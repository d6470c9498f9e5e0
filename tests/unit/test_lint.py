"""The tree passes ``./dev lint`` (ruff, formatting, mypy), so CI catches what a
developer forgot to run: the test command is the only one CI runs."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _lint_paths() -> list[str]:
    """The paths ``./dev lint`` hands ruff, read from the script so the two agree."""
    for line in (ROOT / "dev").read_text().splitlines():
        if '/bin/ruff" check ' not in line:
            continue
        words = shlex.split(line.strip())
        return words[2:]
    raise AssertionError("./dev lint no longer runs `ruff check`")


def _run(*command: str) -> None:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_finds_nothing_and_the_formatting_is_kept() -> None:
    paths = _lint_paths()
    assert "src" in paths and "tests" in paths
    _run(_tool("ruff"), "check", *paths)
    _run(_tool("ruff"), "format", "--check", *paths)


def test_mypy_strict_passes_on_src() -> None:
    _run(_tool("mypy"), "src")
