"""The version checks every compat test starts with: installed = pinned in requirements.txt = the version the
compat module was checked against."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements.txt"


def pinned(distribution: str) -> str | None:
    """The version requirements.txt pins `distribution` to (None when it pins none)."""
    wanted = re.sub(r"[-_.]+", "-", distribution).lower()
    for line in REQUIREMENTS.read_text().splitlines():
        match = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s#;]+)", line)
        if match and re.sub(r"[-_.]+", "-", match.group(1)).lower() == wanted:
            return match.group(3)
    return None


def assert_pinned(distribution: str, *, checked: str, module: str) -> None:
    installed, pin = version(distribution), pinned(distribution)
    assert installed == pin == checked, (
        f"{distribution} is {installed} here, requirements.txt pins {pin}, and {module} was checked against "
        f"{checked}: read {module}'s docstring, check that what it relies on still holds in the new version "
        f"(these tests), then move its version and the pin together"
    )
