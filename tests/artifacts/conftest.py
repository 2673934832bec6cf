"""Fixtures of the artifact tests: blobs under the test's temporary directory."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def artifact_dir(settings, tmp_path):
    directory = tmp_path / "artifacts"
    settings.ARTIFACT_STORAGE_URL = f"file://{directory}"
    return directory
