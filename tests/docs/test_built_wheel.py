"""What users install is what we test: build the wheel, install it into a fresh
virtual environment (no access to this one's packages), and run the demo from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import runlane

ROOT = Path(__file__).resolve().parents[2]
#: Building and installing pays for downloads and a new interpreter on a loaded CI box.
STEP_TIMEOUT = 600


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RUNLANE_APP", "PYTHONPATH")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    done = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.slow
def test_the_built_wheel_installs_into_a_fresh_venv_and_runs_the_demo(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, ROOT, cwd=tmp_path)
    (wheel,) = dist.glob("runlane-*.whl")
    assert wheel.name == f"runlane-{runlane.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"runlane-{runlane.__version__}.dist-info/METADATA").decode()
    dist_info = f"runlane-{runlane.__version__}.dist-info/"
    assert any(n.startswith(dist_info) and n.endswith("/LICENSE") for n in names)
    assert "runlane/py.typed" in names
    assert any(n.startswith("runlane/storage/postgres/migrations/") for n in names)
    assert any(n.startswith("runlane/storage/sqlite/migrations/") for n in names)
    extras = {
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Provides-Extra:")
    }
    assert extras == {"postgres", "postgres-binary", "sqs", "metrics", "otel", "all"}

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)  # no --system-site-packages
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    run(bin_dir / "python", "-m", "pip", "install", "--quiet", wheel, cwd=tmp_path)
    isolated = run(
        bin_dir / "python", "-c", "import runlane, sys; print(runlane.__file__)", cwd=tmp_path
    )
    assert Path(isolated.stdout.strip()).is_relative_to(venv)

    version = run(bin_dir / "runlane", "--version", cwd=tmp_path)
    assert runlane.__version__ in version.stdout
    demo = run(bin_dir / "runlane", "demo", "--runs", "200", "--json", cwd=tmp_path)
    summary = json.loads(demo.stdout)
    assert summary["completed"] is True
    assert summary["totals"]["runs"] == 200
    assert summary["totals"]["succeeded"] + summary["totals"]["failed"] == 200
