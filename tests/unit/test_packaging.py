"""What pyproject.toml publishes: one version, honest extras, no dev tools for users."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import runlane

ROOT = Path(__file__).resolve().parents[2]


def pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def test_the_version_is_written_once_in_the_package_and_read_by_the_build() -> None:
    project = pyproject()["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert pyproject()["tool"]["hatch"]["version"]["path"] == "src/runlane/__init__.py"
    written = [
        path
        for path in [ROOT / "pyproject.toml", *(ROOT / "src").rglob("*.py")]
        if re.search(r"""^(__version__|version)\s*=\s*["']\d""", path.read_text(), re.M)
    ]
    assert written == [ROOT / "src/runlane/__init__.py"]
    assert version("runlane") == runlane.__version__


def test_dev_tools_are_a_dependency_group_not_a_published_extra() -> None:
    config = pyproject()
    extras = config["project"]["optional-dependencies"]
    assert {"postgres", "postgres-binary", "sqs", "all", "dev"} - set(extras) == {"dev"}
    groups = config["dependency-groups"]
    assert {"include-group": "test"} in groups["dev"]
    published = " ".join(dep for deps in extras.values() for dep in deps)
    for tool in ("pytest", "ruff", "mypy", "mkdocs", "ministack", "opentelemetry-sdk"):
        assert tool not in published


def test_psycopg_is_plain_in_postgres_and_binary_only_in_postgres_binary() -> None:
    extras = pyproject()["project"]["optional-dependencies"]
    assert any(dep.startswith("psycopg>=") for dep in extras["postgres"])
    assert not any("binary" in dep for dep in extras["postgres"])
    assert any(dep.startswith("psycopg[binary]") for dep in extras["postgres-binary"])


def test_the_all_extra_brings_every_other_extra_with_plain_psycopg() -> None:
    extras = pyproject()["project"]["optional-dependencies"]
    (everything,) = extras["all"]
    named = set(everything.removeprefix("runlane[").removesuffix("]").split(","))
    assert named == set(extras) - {"all", "postgres-binary"}


def test_metrics_and_otel_extras_bring_only_their_client_and_the_api() -> None:
    extras = pyproject()["project"]["optional-dependencies"]
    assert [d.split(">=")[0] for d in extras["metrics"]] == ["prometheus-client"]
    # The tracing SDK and exporters are the application's choice, never ours.
    assert [d.split(">=")[0] for d in extras["otel"]] == ["opentelemetry-api"]


def test_croniter_has_an_upper_bound() -> None:
    (croniter,) = [d for d in pyproject()["project"]["dependencies"] if d.startswith("croniter")]
    assert re.fullmatch(r"croniter>=[\d.]+,<\d+", croniter)
