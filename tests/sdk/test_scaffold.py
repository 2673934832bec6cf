"""`python -m langbot_sdk new`: each template gives a plugin whose own test passes when run with pytest from
its own directory (with the installed SDK, not the checkout on the path), and which the host's runtime
discovers as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from langbot_sdk.runtime.loader import load_plugins
from langbot_sdk.scaffold import TEMPLATES

pytestmark = pytest.mark.timeout(180)


def author_env() -> dict[str, str]:
    """A runner author's shell: none of the host's settings, nothing of the checkout on the path."""
    drop = {"PYTHONPATH", "DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "LANGBOT_PLUGIN_DIRS"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def sdk(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "langbot_sdk", *args], cwd=cwd, env=author_env(), capture_output=True, text=True
    )


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_a_scaffolded_plugin_passes_its_own_test_and_is_discovered_by_the_runtime(tmp_path: Path, template: str):
    created = sdk("new", f"alice/my-{template}", "--template", template, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    plugin = tmp_path / f"my-{template}"

    # Plain pytest, as in an author's own environment: none of this venv's pytest plugins.
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=plugin, env={**author_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, capture_output=True, text=True,
    )  # fmt: skip
    registry = load_plugins([tmp_path])

    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert " passed" in tested.stdout
    report = registry.reports[0]
    assert (report.status, report.error) == ("loaded", None)
    assert list(registry.runners) == [f"plugin:alice/my-{template}/default"]


def test_the_sdk_is_importable_from_any_directory(tmp_path: Path):
    found = subprocess.run(
        [sys.executable, "-c", "import langbot_sdk.testing, langbot_sdk; print(langbot_sdk.__file__)"],
        cwd=tmp_path, env=author_env(), capture_output=True, text=True,
    )  # fmt: skip

    assert found.returncode == 0, f"is the SDK installed (make venv)? {found.stderr}"
    assert found.stdout.strip().endswith(os.path.join("langbot_sdk", "__init__.py"))


def test_a_bad_name_or_an_occupied_directory_is_refused_with_a_reason(tmp_path: Path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")

    bad_name = sdk("new", "no-slash", cwd=tmp_path)
    occupied = sdk("new", "alice/taken", cwd=tmp_path)
    unknown = sdk("new", "alice/x", "--template", "chatbot", cwd=tmp_path)

    assert bad_name.returncode == 2
    assert "<author>/<name>" in bad_name.stderr
    assert occupied.returncode == 2
    assert "not empty" in occupied.stderr
    assert unknown.returncode == 2
    assert not (tmp_path / "x").exists()


def test_dir_puts_the_plugin_where_asked(tmp_path: Path):
    created = sdk("new", "alice/weather", "--dir", "plugins/weather", cwd=tmp_path)

    assert created.returncode == 0, created.stderr
    assert (tmp_path / "plugins" / "weather" / "manifest.yaml").is_file()
    assert "author: alice" in (tmp_path / "plugins" / "weather" / "manifest.yaml").read_text()
