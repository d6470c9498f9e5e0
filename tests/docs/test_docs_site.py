"""The docs site builds with ``mkdocs build --strict`` (as ``./dev docs`` does), so a
broken link, a missing page or a docstring the API reference cannot render fails CI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_site_builds_strictly_with_an_api_reference(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    assert mkdocs.exists(), "mkdocs is missing: install the dev dependency group (./dev does)"
    site = tmp_path / "site"

    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("getting-started", "guides/concepts", "guides/deployment", "guides/cli"):
        assert (site / page / "index.html").is_file(), page
    reference = (site / "reference/runlane/index.html").read_text(encoding="utf-8")
    documented = set(re.findall(r'id="(runlane\.[A-Za-z_]+)"', reference))
    import runlane

    assert {f"runlane.{name}" for name in runlane.__all__} <= documented
    assert ":func:" not in reference  # Sphinx roles in docstrings render as plain code
