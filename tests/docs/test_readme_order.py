"""The README reads top to bottom as a user's first hour."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_goes_install_define_worker_trigger_look_then_production_then_contributors() -> (
    None
):
    headings = re.findall(r"^## (.+)$", (ROOT / "README.md").read_text(encoding="utf-8"), re.M)
    first_hour = ["Install", "Define", "Run the worker", "Trigger", "Look"]
    assert headings[: len(first_hour)] == first_hour
    # Operator surfaces may follow "Look"; production notes and then the contributors'
    # section close the page.
    assert headings[-2:] == ["In production", "Working on Runlane"]


def test_the_contributors_commands_come_only_in_their_own_section() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    before, contributors = readme.split("## Working on Runlane", 1)
    assert "./dev" not in before
    assert "./dev demo" in contributors and "./dev test" in contributors
