"""The layering is checked, not just described: surfaces → operator → core ← drivers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.split("Contracts:")[-1].replace("0 broken", "")


def _imports_inside_functions(path: Path) -> list[str]:
    """``file:line`` of each import statement inside a function body of ``path``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    found.append(f"{path.relative_to(ROOT)}:{inner.lineno}")
    return found


def test_core_modules_import_at_module_level_only() -> None:
    # A function-level import hides a dependency (usually a cycle) from the signature of
    # the module and from the import contracts.
    core = ROOT / "src" / "runlane" / "core"
    found = [hit for path in sorted(core.glob("*.py")) for hit in _imports_inside_functions(path)]
    assert found == []
