"""The code in the README and the docs guides runs as pasted.

How the blocks are run (keep it this simple):

- Every fenced ```` ```python ```` block of a page is run, in page order, with
  this interpreter, in one temporary directory per page (so a later block sees
  the files and databases an earlier one left behind).
- A block right after an HTML comment ``<!-- file: NAME.py -->`` is written as
  ``NAME.py`` (later blocks can import it) and then run like any other block.
  Any other block is written as ``block_<line>.py`` and run.
- A block right after ``<!-- not-run: REASON -->`` is not run, because it needs
  a service a test machine does not have (a real SQS account, say). The README
  may not use it: every block a new user pastes first must run.

A block fails when it exits non-zero (an exception, a SyntaxError such as a
top-level ``await``), or runs longer than :data:`BLOCK_TIMEOUT` seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Pages whose python blocks are run.
PAGES = [
    "README.md",
    "docs/index.md",
    "docs/getting-started.md",
    "docs/guides/concepts.md",
    "docs/guides/capacity.md",
    "docs/guides/flow-control.md",
    "docs/guides/idempotency.md",
    "docs/guides/schedules.md",
    "docs/guides/transactional-enqueue.md",
    "docs/guides/topics.md",
    "docs/guides/sqs.md",
    "docs/guides/sns.md",
    "docs/guides/observability.md",
    "docs/guides/observing.md",
    "docs/guides/workflows.md",
]
#: Pages whose blocks are a user's app and its tests, run by pytester elsewhere
#: (tests/e2e/test_pytest_plugin.py), not as plain scripts.
RUN_ELSEWHERE = ["docs/guides/testing.md"]

BLOCK_TIMEOUT = 60
_FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!--\s*(file|not-run):\s*(.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    line: int
    code: str
    file_name: str | None
    not_run_reason: str | None


def python_blocks(page: Path) -> list[Block]:
    """Every ```python block of ``page`` with the marker comment just above it, if any."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        kind, value = marker.groups() if marker else (None, None)
        blocks.append(
            Block(
                line=line,
                code=match.group(1),
                file_name=value if kind == "file" else None,
                not_run_reason=value if kind == "not-run" else None,
            )
        )
    return blocks


def test_every_listed_page_exists_and_every_docs_page_with_python_is_listed() -> None:
    with_python = {
        str(page.relative_to(ROOT))
        for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
        if python_blocks(page)
    }
    assert with_python == set(PAGES) | set(RUN_ELSEWHERE)


def test_the_readme_runs_every_block() -> None:
    blocks = python_blocks(ROOT / "README.md")
    assert len(blocks) >= 3
    assert [block.line for block in blocks if block.not_run_reason] == []


@pytest.mark.parametrize("page", PAGES)
def test_python_blocks_run_as_pasted(page: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RUNLANE_APP", "PYTHONPATH")}
    blocks = python_blocks(ROOT / page)
    assert blocks, f"no python block found in {page}"
    for block in blocks:
        if block.not_run_reason:
            continue
        script = tmp_path / (block.file_name or f"block_{block.line}.py")
        script.write_text(block.code, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, script.name],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, (
            f"{page}, the python block at line {block.line} failed:\n"
            f"{block.code}\n--- stderr ---\n{done.stderr}"
        )
